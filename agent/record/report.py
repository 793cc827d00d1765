"""runs/<run-id>/report.md and report.html: what the person at breakfast opens first.

Both are rendered from summary.json's models and patch.diff alone, and rewritten after every task, so a night cut
short still leaves a report. The HTML is one self-contained file (no external CSS, fonts or scripts): it opens from
file:// on an air-gapped laptop. Diffs are highlighted by Pygments, collapsed in <details> until asked for.
Everything a task, the model, a repository or its tests wrote is text in both: escaped by agent.safety.markdown
and html.escape, and the model's own message comes after our verdict and before our evidence, never around it.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer

from agent.protocol.records import EnvironmentRecord, RunSummary, TaskSummary
from agent.safety import markdown as md

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


def task_figures(task: TaskSummary, changes: list[FileChange]) -> dict[str, str]:
    """The row every view shows for a task, as text, in column order."""
    metrics = task.metrics
    return {
        "#": str(task.index),
        "task": task.task,
        "verdict": task.shown_verdict,
        "branch": task.branch or "-",
        "commit": (task.commit or "")[:12] or "-",
        "files": str(len(changes)),
        "+/-": f"+{sum(c.added for c in changes)}/-{sum(c.removed for c in changes)}",
        "tests": tests_cell(task),
        "regressed/fixed/flaky": (
            f"{len(task.tests.regressed)}/{len(task.tests.fixed)}/{len(task.tests.flaky)}" if task.tests else "-"
        ),
        "turns": str(task.turns),
        "wall": f"{task.wall_time_s:.0f}s",
        "prompt tokens": str(metrics.prompt_tokens) if metrics else "-",
        "cache hit": _ratio(metrics.cache_hit_ratio) if metrics else "-",
        "acceptance": _ratio(metrics.acceptance_rate) if metrics else "-",
        "accepted/pass": _number(metrics.accepted_per_pass) if metrics else "-",
    }


def tests_cell(task: TaskSummary) -> str:
    if task.tests is None:
        return "-"
    return f"{task.tests.baseline or 'none'} → {task.tests.final or 'not run'}"


def evidence_lines(task: TaskSummary) -> list[tuple[str, list[str]]]:
    """(kind, first names) for every non-empty evidence list, with a count of the rest."""
    if task.tests is None:
        return []
    found = []
    for kind in EVIDENCE_LISTS:
        names = getattr(task.tests, kind)
        if names:
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
    statuses = verdict_counts(summary)
    metrics = summary.metrics
    tokens = (
        f"; {metrics.prompt_tokens} prompt tokens, cache hit {_ratio(metrics.cache_hit_ratio)}, "
        f"acceptance {_ratio(metrics.acceptance_rate)}, accepted per pass {_number(metrics.accepted_per_pass)}"
        if metrics
        else ""
    )
    return f"{len(summary.tasks)} tasks: {statuses}; wall {summary.wall_time_s:.0f}s{tokens}"


def _environment_line(environment: EnvironmentRecord) -> str:
    """The image the tasks ran in; a failed build with its step, the last lines of its output and its log."""
    if environment.status == "failed":
        tail = " / ".join(environment.log_tail[-3:])
        return f"FAILED, tasks unverified: {environment.error} (log: {environment.log})" + (f": {tail}" if tail else "")
    counted = f", {environment.tests_collected} tests collected" if environment.tests_collected is not None else ""
    return f"{environment.status} {environment.image} ({environment.source}){counted}"


def _environment(summary: RunSummary) -> str:
    if len(summary.environments) == 1:
        return _environment_line(summary.environments[0])
    lines = [f"{Path(record.repo).name}: {_environment_line(record)}" for record in summary.environments]
    return "; ".join(lines) or "-"


def _header_lines(summary: RunSummary) -> list[tuple[str, str]]:
    return [
        ("run", summary.run_id),
        ("repositories", ", ".join(summary.repos)) if len(summary.repos) > 1 else ("repository", summary.repo),
        ("model", summary.model),
        ("server", summary.server_url),
        ("started", summary.started_at or "-"),
        ("ended", summary.ended_at or "running"),
        ("environment", _environment(summary)),
        ("totals", _totals(summary)),
        *([("run failed", summary.error)] if summary.error is not None else []),
    ]


def render_markdown(summary: RunSummary, diffs: dict[int, str]) -> str:
    lines = [f"# refactor-agent run {md.inline(summary.run_id)}", ""]
    lines += [f"- **{label}**: {md.inline(value)}" for label, value in _header_lines(summary)]
    lines += [f"- **warning**: {md.inline(warning)}" for warning in summary.warnings]
    rows = [task_figures(task, file_changes(diffs.get(task.index, ""))) for task in summary.tasks]
    if rows:
        columns = list(rows[0])
        lines += ["", "| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
        lines += ["| " + " | ".join(md.inline(row[column]) for column in columns) + " |" for row in rows]
    for task in summary.tasks:
        lines += ["", f"## Task {task.index}: {md.inline(task.task)}", ""]
        lines.append(f"{md.inline(task.shown_verdict)}: {md.inline(task.reason)}")
        if len(summary.repos) > 1:  # a night over several repositories: say which one
            lines += ["", f"Repository: {md.code(task.repo or '-')}"]
        lines += [f"- warning: {md.inline(warning)}" for warning in task.warnings]
        if task.summary:
            lines += ["", "Commit message (the model's):", "", md.fenced(task.summary)]
        if task.tests is not None:
            lines += ["", f"Tests: {md.inline(tests_cell(task))}"]
            for kind, names in evidence_lines(task):
                lines += ["", f"{md.inline(kind)}:", ""] + [f"- {md.code(name)}" for name in names]
        changes = file_changes(diffs.get(task.index, ""))
        if changes:
            lines += ["", "Files:", ""] + [f"- {md.code(c.path)} +{c.added}/-{c.removed}" for c in changes]
    return "\n".join(lines) + "\n"


_PAGE_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #1f2328; }
table { border-collapse: collapse; margin: 1rem 0; }
th, td { border: 1px solid #d0d7de; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
dl.run { display: grid; grid-template-columns: max-content auto; gap: 0.2rem 1rem; }
dt { font-weight: 600; }
.verdict { font-weight: 600; }
.warning { color: #9a6700; }
pre.message { background: #f6f8fa; padding: 0.5rem; white-space: pre-wrap; }
details { margin: 0.5rem 0 1rem; }
.highlight pre { padding: 0.5rem; overflow-x: auto; }
"""


def _verdict_html(task: TaskSummary) -> str:
    colour = VERDICT_COLOURS.get(task.verdict, "#1f2328")
    return f'<span class="verdict" style="color: {colour}">{html.escape(task.shown_verdict)}</span>'


def _task_section(task: TaskSummary, diff: str, formatter: HtmlFormatter) -> str:
    parts = [
        f'<section class="task" id="task-{task.index}">',
        f"<h2>Task {task.index}: {html.escape(task.task)}</h2>",
        f"<p>{_verdict_html(task)}: {html.escape(task.reason)}</p>",
    ]
    parts += [f'<p class="warning">warning: {html.escape(warning)}</p>' for warning in task.warnings]
    if task.summary:
        parts.append(f'<pre class="message">{html.escape(task.summary)}</pre>')
    if task.tests is not None:
        parts.append(f'<p class="tests">Tests: {html.escape(tests_cell(task))}</p>')
        for kind, names in evidence_lines(task):
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


def render_html(summary: RunSummary, diffs: dict[int, str]) -> str:
    formatter = HtmlFormatter(cssclass="highlight")
    header = "\n".join(
        f"<dt>{html.escape(label)}</dt><dd>{html.escape(value)}</dd>" for label, value in _header_lines(summary)
    )
    warnings = "".join(f'<p class="warning">warning: {html.escape(text)}</p>' for text in summary.warnings)
    rows = [(task, task_figures(task, file_changes(diffs.get(task.index, "")))) for task in summary.tasks]
    table = ""
    if rows:
        columns = list(rows[0][1])
        head = "".join(f"<th>{html.escape(column)}</th>" for column in columns)
        body = "\n".join(
            '<tr class="task-row">'
            + "".join(
                f"<td>{_verdict_html(task) if column == 'verdict' else html.escape(figures[column])}</td>"
                for column in columns
            )
            + "</tr>"
            for task, figures in rows
        )
        table = f'<table class="tasks"><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>'
    sections = "\n".join(_task_section(task, diffs.get(task.index, ""), formatter) for task in summary.tasks)
    title = f"refactor-agent run {html.escape(summary.run_id)}"
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{title}</title>\n'
        f"<style>{_PAGE_STYLE}{formatter.get_style_defs('.highlight')}</style></head>\n"
        f'<body><h1>{title}</h1>\n<dl class="run">{header}</dl>\n{warnings}\n{table}\n{sections}\n</body></html>\n'
    )
