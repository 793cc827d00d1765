"""runs/<run-id>/report.md and report.html: what the person at breakfast opens first.

Both are rendered from summary.json's models and patch.diff alone, and rewritten after every task, so a night cut
short still leaves a report. The HTML is one self-contained file (no external CSS, fonts or scripts): it opens from
file:// on an air-gapped laptop. Diffs are highlighted by Pygments, collapsed in <details> until asked for.
Everything a task, the model, a repository or its tests wrote is text in both: escaped by agent.safety.markdown
and html.escape, and the model's own message comes after our verdict and before our evidence, never around it.
"""

from __future__ import annotations

import functools
import html
import re
from dataclasses import dataclass
from pathlib import Path

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer

from agent.protocol.records import EnvironmentRecord, KindTally, RepoFates, RunSummary, TaskSummary
from agent.record.reasons import reason_line, verdict_word, why_line
from agent.safety import markdown as md
from agent.safety.printable import counted

# `2 passed, 1 failed`: the passed count of a suite's description (agent.gate.results.SuiteRun.describe).
_PASSED = re.compile(r"([\d,]+) passed")
# journal.append_patch writes "# task <n>: <task>" before each task's diff; diff lines never start with "#".
_TASK_HEADER = re.compile(r"^# task (\d+): ", re.MULTILINE)

VERDICT_COLOURS = {
    "verified": "#1a7f37",
    "unverified": "#9a6700",
    "regressed": "#cf222e",
    "no_changes": "#57606a",
    "failed": "#cf222e",
    "interrupted": "#9a6700",
}
# The evidence lists a task section names, in the order a reviewer cares about them.
EVIDENCE_LISTS = ("test_infrastructure", "regressed", "removed", "syntax_errors", "flaky", "fixed", "still_failing")
LISTED_PER_KIND = 30
# Highlighting costs time in proportion to the text, and a page of megabytes helps nobody: past this, the report
# shows the beginning and points at patch.diff.
MAX_RENDERED_DIFF_CHARS = 400_000


@dataclass(frozen=True)
class FileChange:
    path: str
    added: int
    removed: int


def split_patch(text: str) -> dict[int, str]:
    """patch.diff cut into each task's diff, by task index; a task without changes maps to ''."""
    headers = list(_TASK_HEADER.finditer(text))
    diffs: dict[int, str] = {}
    for position, header in enumerate(headers):
        end = headers[position + 1].start() if position + 1 < len(headers) else len(text)
        _, _, body = text[header.start() : end].partition("\n")
        diffs[int(header.group(1))] = body.strip("\n")
    return diffs


def file_changes(diff: str) -> list[FileChange]:
    """Files a unified diff touches, with added and removed line counts (binary files count 0/0)."""
    changes: list[FileChange] = []
    path, added, removed = None, 0, 0
    in_hunk = False
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            if path is not None:
                changes.append(FileChange(path, added, removed))
            path, added, removed, in_hunk = line.rsplit(" b/", 1)[-1], 0, 0, False
        elif line.startswith("@@"):
            in_hunk = True
        elif in_hunk and line.startswith("+"):
            added += 1
        elif in_hunk and line.startswith("-"):
            removed += 1
    if path is not None:
        changes.append(FileChange(path, added, removed))
    return changes


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _passed(description: str) -> int:
    found = _PASSED.search(description)
    return int(found.group(1).replace(",", "")) if found else 0


def tests_delta(task: TaskSummary) -> str:
    """`3→3 passed`, `3→2 passed −1`, `3→4 passed +1`; `3→? (did not run)`; `-` when no suite ran."""
    tests = task.tests
    if tests is None or tests.baseline is None or tests.baseline.startswith("did not run"):
        return "-"
    before = _passed(tests.baseline)
    if tests.final is None or tests.final.startswith("did not run"):
        return f"{before}→? (did not run)"
    after = _passed(tests.final)
    change = f" −{before - after}" if after < before else f" +{after - before}" if after > before else ""
    return f"{before}→{after} passed{change}"


def files_cell(changes: list[FileChange]) -> str:
    """`3 +5/-5`: files, lines added and removed; `-` when none."""
    if not changes:
        return "-"
    return f"{len(changes)} +{sum(c.added for c in changes)}/-{sum(c.removed for c in changes)}"


def reviewer_row(task: TaskSummary, changes: list[FileChange]) -> dict[str, str]:
    """What to merge, at a glance: the five columns every view's task table shows (100 columns, a phone)."""
    return {
        "#": str(task.index),
        "verdict": task.shown_verdict,
        "task": task.task,
        "tests Δ": tests_delta(task),
        "files ±": files_cell(changes),
    }


def performance_row(task: TaskSummary, branch_state: str | None = None) -> dict[str, str]:
    """The operator's columns (`review RUN --wide`, the report's Performance section): where, how long, how fast."""
    metrics = task.metrics
    return {
        "#": str(task.index),
        "branch": task.branch or "-",
        "commit": (task.commit or "")[:12] or "-",
        **({"branch state": branch_state} if branch_state is not None else {}),
        "turns": str(task.turns),
        "compactions": str(len(task.compactions)),
        "wall": f"{task.wall_time_s:.0f}s",
        "prompt tokens": str(metrics.prompt_tokens) if metrics else "-",
        "cache hit": _ratio(metrics.cache_hit_ratio) if metrics else "-",
        "acceptance": _ratio(metrics.acceptance_rate) if metrics else "-",
        "accepted/pass": _number(metrics.accepted_per_pass) if metrics else "-",
    }


def task_figures(task: TaskSummary, changes: list[FileChange]) -> dict[str, str]:
    """Every figure of a task, for `review RUN --json`: the reviewer's columns, the operator's, and the older
    columns (files, +/-, tests, regressed/fixed/flaky) that JSON readers may rely on."""
    return {
        **reviewer_row(task, changes),
        "branch": task.branch or "-",
        "commit": (task.commit or "")[:12] or "-",
        "files": str(len(changes)),
        "+/-": f"+{sum(c.added for c in changes)}/-{sum(c.removed for c in changes)}",
        "tests": tests_cell(task),
        "regressed/fixed/flaky": (
            f"{len(task.tests.regressed)}/{len(task.tests.fixed)}/{len(task.tests.flaky)}" if task.tests else "-"
        ),
        **{key: value for key, value in performance_row(task).items() if key not in ("#", "branch", "commit")},
    }


@dataclass(frozen=True)
class BaseFailures:
    """The tests already failing on a base commit before any task: every task on it inherits them."""

    repo: str
    base_commit: str
    tests: frozenset[str]

    def line(self, several_repositories: bool) -> str:
        where = f"{Path(self.repo).name} at " if several_repositories else ""
        names = ", ".join(sorted(self.tests))
        shown = f"{counted(len(self.tests), 'test')}: {names}"
        return f"already failing on the base {where}{self.base_commit[:10]} (before any task): {shown}"


def base_failures(summary: RunSummary) -> list[BaseFailures]:
    """Per (repository, base commit), what failed there before any task (still failing or fixed by a task): said
    once per run, not in every task."""
    found: dict[tuple[str, str], set[str]] = {}
    for task in summary.tasks:
        if task.tests is not None and task.base_commit:
            key = (task.repo or summary.repo, task.base_commit)
            found.setdefault(key, set()).update(task.tests.still_failing, task.tests.fixed)
    return [BaseFailures(repo, base, frozenset(tests)) for (repo, base), tests in found.items() if tests]


def base_failure_lines(summary: RunSummary) -> list[str]:
    return [failures.line(len(summary.repos) > 1) for failures in base_failures(summary)]


def _on_base(summary: RunSummary, task: TaskSummary) -> frozenset[str]:
    key = (task.repo or summary.repo, task.base_commit)
    return next((f.tests for f in base_failures(summary) if (f.repo, f.base_commit) == key), frozenset())


def why_lines(summary: RunSummary) -> list[str]:
    """One line for each task that is not verified: why."""
    return [why_line(task) for task in summary.tasks if task.verdict != "verified"]


# The "since last night" block's rows, in its order: the RepoFates field and the word it is shown with.
SINCE_ROWS = (
    ("new", "new"),
    ("updated", "updated"),
    ("rebased", "rebased"),
    ("unchanged", "unchanged"),
    ("no_changes", "no changes needed any more (branch deleted)"),
    ("retired", "retired (merged)"),
    ("discarded", "discarded"),
    ("archived", "archived (left the night file)"),
    ("queued", "queued for a later night (max_open)"),
    ("outside", "changed outside refactor-agent, left alone"),
    ("unfinished", "not finished (resume goes on)"),
)


def merge_rate(tally: KindTally) -> str:
    """`rename: 1 merged, 1 discarded, 2 waiting; merge rate 50%` (merged / (merged + discarded))."""
    rate = tally.merge_rate
    shown = "-" if rate is None else f"{rate:.0%}"
    counts = f"{tally.merged} merged, {tally.discarded} discarded, {tally.waiting} waiting"
    return f"{tally.kind}: {counts}; merge rate {shown}"


def base_since(base: str, previous: str | None) -> str:
    """`first night`, `unchanged since last night`, `last night 8a6b3382df8a`: where the default branch was."""
    if previous is None:
        return "first night"
    return "unchanged since last night" if previous == base else f"last night {previous[:12]}"


def since_lines(fates: RepoFates) -> tuple[str, list[str]]:
    """(heading, one line per branch, then one per kind of task): a repository's "since last night"."""
    since = base_since(fates.base, fates.previous_base)
    heading = f"since last night: {fates.repo}: {fates.default_branch} at {fates.base[:12]} ({since})"
    if fates.skipped is not None:
        heading += f"; skipped tonight: {fates.skipped}"
    lines = [f"{words}: {branch}" for field, words in SINCE_ROWS for branch in getattr(fates, field)]
    lines += [f"still failing for {counted(nights, 'night')}: {branch}" for branch, nights in fates.failing.items()]
    lines += [f"kind {merge_rate(tally)}" for tally in fates.kinds]
    return heading, lines


def since_text(summary: RunSummary) -> list[str]:
    """The block as plain lines (`review RUN`): each repository's heading, its rows indented."""
    text = []
    for fates in summary.fates:
        heading, lines = since_lines(fates)
        text += [heading, *(f"  {line}" for line in lines)]
    return text


def tests_cell(task: TaskSummary) -> str:
    if task.tests is None:
        return "-"
    return f"{task.tests.baseline or 'none'} → {task.tests.final or 'not run'}"


def evidence_lines(task: TaskSummary, on_base: frozenset[str] = frozenset()) -> list[tuple[str, list[str]]]:
    """(kind, first names) for every non-empty evidence list, with a count of the rest. Still failing is left out
    when it is what already failed on the base (`on_base`, said once for the run)."""
    if task.tests is None:
        return []
    found = []
    for kind in EVIDENCE_LISTS:
        names = getattr(task.tests, kind)
        if kind == "still_failing" and names and set(names) == on_base:
            found.append(("still failing", [f"the {counted(len(names), 'test')} already failing on the base"]))
        elif names:
            shown = names[:LISTED_PER_KIND]
            rest = [f"... and {len(names) - len(shown)} more"] if len(names) > len(shown) else []
            found.append((f"{kind.replace('_', ' ')} ({len(names)})", shown + rest))
    return found


def verdict_tally(summary: RunSummary) -> dict[str, int]:
    """How many tasks ended with each verdict, by verdict as shown (`verified*` is not counted as `verified`)."""
    counts: dict[str, int] = {}
    for task in summary.tasks:
        counts[task.shown_verdict] = counts.get(task.shown_verdict, 0) + 1
    return dict(sorted(counts.items()))


def verdict_counts(summary: RunSummary) -> str:
    """'1 regressed, 2 verified'."""
    tally = verdict_tally(summary)
    return ", ".join(f"{count} {verdict}" for verdict, count in tally.items()) or "no tasks finished"


def _totals(summary: RunSummary) -> str:
    return f"{counted(len(summary.tasks), 'task')}: {verdict_counts(summary)}; wall {summary.wall_time_s:.0f}s"


def _performance_totals(summary: RunSummary) -> str:
    metrics = summary.metrics
    if metrics is None:
        return "no requests measured"
    return (
        f"{metrics.prompt_tokens} prompt tokens, cache hit {_ratio(metrics.cache_hit_ratio)}, "
        f"acceptance {_ratio(metrics.acceptance_rate)}, accepted per pass {_number(metrics.accepted_per_pass)}"
    )


def model_line(summary: RunSummary) -> str:
    """The model the server said it runs, beside the name asked for when they differ."""
    if summary.served_model and summary.served_model != summary.model:
        return f"{summary.served_model} (served; requested {summary.model})"
    return summary.model


def _environment_line(environment: EnvironmentRecord) -> str:
    """The image the tasks ran in; a failed build with its step, the last lines of its output and its log."""
    if environment.status == "failed":
        tail = " / ".join(environment.log_tail[-3:])
        return f"FAILED, tasks unverified: {environment.error} (log: {environment.log})" + (f": {tail}" if tail else "")
    tests = environment.tests_collected
    collected = f", {counted(tests, 'test')} collected" if tests is not None else ""
    return f"{environment.status} {environment.image} ({environment.source}){collected}"


def _environment(summary: RunSummary) -> str:
    if len(summary.environments) == 1:
        return _environment_line(summary.environments[0])
    lines = [f"{Path(record.repo).name}: {_environment_line(record)}" for record in summary.environments]
    return "; ".join(lines) or "-"


def _header_lines(summary: RunSummary) -> list[tuple[str, str]]:
    return [
        ("run", summary.run_id),
        ("repositories", ", ".join(summary.repos)) if len(summary.repos) > 1 else ("repository", summary.repo),
        ("model", model_line(summary)),
        ("server", summary.server_url),
        ("started", summary.started_at or "-"),
        ("ended", summary.ended_at or "running"),
        ("environment", _environment(summary)),
        ("totals", _totals(summary)),
        *([("run failed", summary.error)] if summary.error is not None else []),
    ]


def _md_table(rows: list[dict[str, str]]) -> list[str]:
    if not rows:
        return []
    columns = list(rows[0])
    lines = ["", "| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    return lines + ["| " + " | ".join(md.inline(row[column]) for column in columns) + " |" for row in rows]


def repair_history(task: TaskSummary) -> str | None:
    """`round 1: 2 regressed → round 2: 1`: what each gate check found, when there was more than one."""
    rounds = task.tests.rounds if task.tests is not None else []
    if len(rounds) < 2:
        return None
    return " → ".join([f"round 1: {rounds[0]} regressed", *(f"round {n}: {c}" for n, c in enumerate(rounds[1:], 2))])


def rejected_calls(task: TaskSummary) -> str | None:
    """`str_replace 4, view_file 1; last: old occurs 0 times ...`: the tool calls that came back as errors."""
    if not task.rejected_calls:
        return None
    by_tool = ", ".join(f"{name} {number}" for name, number in sorted(task.rejected_calls.items()))
    return by_tool + (f"; last: {task.last_error}" if task.last_error else "")


def _message_label(task: TaskSummary) -> str:
    return "Commit message (the model's):" if task.commit else "The model's answer:"


def _markdown_task(summary: RunSummary, task: TaskSummary, diff: str) -> list[str]:
    lines = ["", f"## Task {task.index}: {md.inline(task.task)}", ""]
    lines.append(f"{md.inline(verdict_word(task))}: {md.inline(reason_line(task))}")
    if len(summary.repos) > 1:  # a night over several repositories: say which one
        lines += ["", f"Repository: {md.code(task.repo or '-')}"]
    lines += [f"- warning: {md.inline(warning)}" for warning in task.warnings]
    if task.summary:
        lines += ["", _message_label(task), "", md.fenced(task.summary)]
    if (rejected := rejected_calls(task)) is not None:
        lines += ["", f"Rejected tool calls: {md.inline(rejected)}"]
    if task.compactions:
        lines += ["", "Compacted to fit the server's window:", ""]
        lines += [f"- {md.inline(record.describe())}" for record in task.compactions]
    if task.tests is not None:
        lines += ["", f"Tests: {md.inline(tests_cell(task))}"]
        if (history := repair_history(task)) is not None:
            lines += ["", f"Repair history: {md.inline(history)}"]
        for test, failure in task.tests.failures.items():
            lines += ["", f"Failure of {md.code(test)}:", "", md.fenced(failure)]
        for kind, names in evidence_lines(task, _on_base(summary, task)):
            lines += ["", f"{md.inline(kind)}:", ""] + [f"- {md.code(name)}" for name in names]
    changes = file_changes(diff)
    if changes:
        lines += ["", "Files:", ""] + [f"- {md.code(c.path)} +{c.added}/-{c.removed}" for c in changes]
    return lines


def render_markdown(summary: RunSummary, diffs: dict[int, str]) -> str:
    lines = [f"# refactor-agent run {md.inline(summary.run_id)}", ""]
    lines += [f"- **{label}**: {md.inline(value)}" for label, value in _header_lines(summary)]
    lines += [f"- **warning**: {md.inline(warning)}" for warning in summary.warnings]
    lines += _md_table([reviewer_row(task, file_changes(diffs.get(task.index, ""))) for task in summary.tasks])
    if base := base_failure_lines(summary):
        lines += ["", *map(md.inline, base)]
    if why := why_lines(summary):
        lines += ["", *(f"- {md.inline(line)}" for line in why)]
    for fates in summary.fates:
        heading, since = since_lines(fates)
        lines += ["", f"**{md.inline(heading)}**", "", *(f"- {md.inline(line)}" for line in since)]
    for task in summary.tasks:
        lines += _markdown_task(summary, task, diffs.get(task.index, ""))
    lines += ["", "## Performance", "", md.inline(_performance_totals(summary))]
    lines += _md_table([performance_row(task) for task in summary.tasks])
    if summary.removed:
        lines += ["", "## Removed at the night's end (gc)", "", *(f"- {md.inline(line)}" for line in summary.removed)]
    return "\n".join(lines) + "\n"


# The task table fits a phone (390 px) and a desktop: fixed layout, long words wrap anywhere; the operator's table
# scrolls inside its own box instead of widening the page.
_PAGE_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #1f2328; overflow-wrap: anywhere; }
table { border-collapse: collapse; margin: 1rem 0; }
th, td { border: 1px solid #d0d7de; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
table.tasks { width: 100%; table-layout: fixed; }
table.tasks td, table.tasks th { overflow-wrap: anywhere; }
col.index { width: 2.5em; } col.verdict { width: 7em; } col.tests { width: 7.5em; } col.files { width: 5.5em; }
div.wide { overflow-x: auto; }
div.wide td { white-space: nowrap; }
dl.run { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 0.2rem 1rem; }
dd { margin: 0; overflow-wrap: anywhere; }
dt { font-weight: 600; }
.verdict { font-weight: 600; }
.warning { color: #9a6700; }
p.why { margin: 0.25rem 0; }
pre.message { background: #f6f8fa; padding: 0.5rem; white-space: pre-wrap; overflow-wrap: anywhere; }
details { margin: 0.5rem 0 1rem; }
.highlight pre { padding: 0.5rem; overflow-x: auto; }
@media (max-width: 600px) {
  body { margin: 0.5rem; }
  table.tasks { font-size: 0.85em; }
  th, td { padding: 0.2rem 0.3rem; }
}
"""
_TASK_COLUMNS = (
    '<colgroup><col class="index"><col class="verdict"><col><col class="tests"><col class="files"></colgroup>'
)


def _verdict_html(task: TaskSummary, shown: str | None = None) -> str:
    colour = VERDICT_COLOURS.get(task.verdict, "#1f2328")
    return f'<span class="verdict" style="color: {colour}">{html.escape(shown or task.shown_verdict)}</span>'


def _html_rows(rows: list[tuple[TaskSummary, dict[str, str]]], row_class: str) -> tuple[str, str]:
    """(head, body) of a table of rows; the verdict cell coloured."""
    columns = list(rows[0][1])
    head = "".join(f"<th>{html.escape(column)}</th>" for column in columns)
    body = "\n".join(
        f'<tr class="{row_class}">'
        + "".join(
            f"<td>{_verdict_html(task) if column == 'verdict' else html.escape(figures[column])}</td>"
            for column in columns
        )
        + "</tr>"
        for task, figures in rows
    )
    return head, body


def _task_section(summary: RunSummary, task: TaskSummary, diff: str, formatter: HtmlFormatter) -> str:
    parts = [
        f'<section class="task" id="task-{task.index}">',
        f"<h2>Task {task.index}: {html.escape(task.task)}</h2>",
        f"<p>{_verdict_html(task, verdict_word(task))}: {html.escape(reason_line(task))}</p>",
    ]
    parts += [f'<p class="warning">warning: {html.escape(warning)}</p>' for warning in task.warnings]
    if task.summary:
        parts.append(f"<p>{html.escape(_message_label(task))}</p>")
        parts.append(f'<pre class="message">{html.escape(task.summary)}</pre>')
    if (rejected := rejected_calls(task)) is not None:
        parts.append(f'<p class="rejected">Rejected tool calls: {html.escape(rejected)}</p>')
    if task.compactions:
        items = "".join(f"<li>{html.escape(record.describe())}</li>" for record in task.compactions)
        parts.append(f'<div class="compactions">Compacted to fit the server\'s window:<ul>{items}</ul></div>')
    if task.tests is not None:
        parts.append(f'<p class="tests">Tests: {html.escape(tests_cell(task))}</p>')
        if (history := repair_history(task)) is not None:
            parts.append(f'<p class="repairs">Repair history: {html.escape(history)}</p>')
        for test, failure in task.tests.failures.items():
            parts.append(f"<p>Failure of <code>{html.escape(test)}</code>:</p>")
            parts.append(f'<pre class="message">{html.escape(failure)}</pre>')
        for kind, names in evidence_lines(task, _on_base(summary, task)):
            items = "".join(f"<li><code>{html.escape(name)}</code></li>" for name in names)
            parts.append(f'<div class="evidence"><strong>{html.escape(kind)}</strong><ul>{items}</ul></div>')
    if diff:
        shown = (
            diff[: diff.rfind("\n", 0, MAX_RENDERED_DIFF_CHARS) + 1] if len(diff) > MAX_RENDERED_DIFF_CHARS else diff
        )
        cut = f" (the first {len(shown)} of {len(diff)} characters; the rest is in patch.diff)" if shown != diff else ""
        parts.append(
            f'<details class="diff"><summary>diff ({len(file_changes(diff))} files){cut}</summary>'
            f"{highlight(shown, DiffLexer(), formatter)}</details>"
        )
    else:
        parts.append("<p>No changes.</p>")
    parts.append("</section>")
    return "\n".join(parts)


def _since_html(fates: RepoFates) -> str:
    heading, lines = since_lines(fates)
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return f'<div class="since"><p><strong>{html.escape(heading)}</strong></p><ul>{items}</ul></div>'


@functools.cache
def _diff_highlighting() -> tuple[HtmlFormatter, str]:
    """The diffs' formatter and its style sheet, the same for every report (rewritten after each task): the formatter
    builds its style's stylesheet when it is made, most of a small report's rendering."""
    formatter = HtmlFormatter(cssclass="highlight")
    return formatter, formatter.get_style_defs(".highlight")


def render_html(summary: RunSummary, diffs: dict[int, str]) -> str:
    formatter, style = _diff_highlighting()
    header = "\n".join(
        f"<dt>{html.escape(label)}</dt><dd>{html.escape(value)}</dd>" for label, value in _header_lines(summary)
    )
    warnings = "".join(f'<p class="warning">warning: {html.escape(text)}</p>' for text in summary.warnings)
    changes = {task.index: file_changes(diffs.get(task.index, "")) for task in summary.tasks}
    table = performance = ""
    if summary.tasks:
        head, body = _html_rows([(task, reviewer_row(task, changes[task.index])) for task in summary.tasks], "task-row")
        table = f'<table class="tasks">{_TASK_COLUMNS}<thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>'
        head, body = _html_rows([(task, performance_row(task)) for task in summary.tasks], "performance-row")
        performance = (
            f'<div class="wide"><table class="performance"><thead><tr>{head}</tr></thead>'
            f"<tbody>\n{body}\n</tbody></table></div>"
        )
    base = "".join(f'<p class="base">{html.escape(line)}</p>' for line in base_failure_lines(summary))
    why = "".join(f'<p class="why">{html.escape(line)}</p>' for line in why_lines(summary))
    since = "".join(_since_html(fates) for fates in summary.fates)
    removed = ""
    if summary.removed:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in summary.removed)
        removed = f'<section class="removed"><h2>Removed at the night\'s end (gc)</h2><ul>{items}</ul></section>\n'
    sections = "\n".join(_task_section(summary, task, diffs.get(task.index, ""), formatter) for task in summary.tasks)
    title = f"refactor-agent run {html.escape(summary.run_id)}"
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{title}</title>\n"
        f"<style>{_PAGE_STYLE}{style}</style></head>\n"
        f'<body><h1>{title}</h1>\n<dl class="run">{header}</dl>\n{warnings}\n{table}\n{base}\n{why}\n{since}\n'
        f"{sections}\n"
        f'<section class="performance"><h2>Performance</h2>\n<p>{html.escape(_performance_totals(summary))}</p>\n'
        f"{performance}</section>\n{removed}</body></html>\n"
    )
