"""A pull-request description in Markdown for one task's branch: `gh pr create --body-file` or GitLab's
`glab mr create --description "$(cat FILE)"` take it as it is. Everything the model or the repository wrote in it
is text (agent.safety.markdown): it cannot hide the verdict, the evidence or the risk notes, nor pass for them."""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import PurePosixPath

from agent.protocol.config import RunConfig
from agent.protocol.records import TaskSummary, unmarked
from agent.record.reasons import reason_line, verdict_reason
from agent.record.report import evidence_lines, tests_cell
from agent.review.change import TaskChange
from agent.safety import markdown as md
from agent.safety.printable import counted

# Regressed tests the warning and the risk notes name; the rest are counted (the evidence lists them).
NAMED_REGRESSIONS = 10

# Files whose change alters how the code is built, configured, tested or deployed: a reviewer looks twice.
CONFIG_PATTERNS = (
    "pyproject.toml",
    "setup.cfg",
    "setup.py",
    "*.ini",
    "*.toml",
    "*.yaml",
    "*.yml",
    "Dockerfile",
    "*.dockerfile",
    "Makefile",
    "package.json",
    "go.mod",
    "Cargo.toml",
)
CI_DIRECTORIES = (".github/", ".gitlab-ci", ".circleci/", ".buildkite/", "ci/", ".ci/")


def is_test_file(path: str) -> bool:
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else path
    return "tests" in parts[:-1] or "test" in parts[:-1] or fnmatch(name, "test_*.py") or fnmatch(name, "*_test.py")


def is_config_file(path: str) -> bool:
    name = PurePosixPath(path).name
    return any(fnmatch(name, pattern) for pattern in CONFIG_PATTERNS) or path.startswith(CI_DIRECTORIES)


def _regressed(task: TaskSummary) -> list[str]:
    return task.tests.regressed if task.tests is not None else []


def _named(tests: list[str]) -> str:
    more = f" and {len(tests) - NAMED_REGRESSIONS} more" if len(tests) > NAMED_REGRESSIONS else ""
    return _names(tests[:NAMED_REGRESSIONS]) + more


def warning(task: TaskSummary) -> list[str]:
    """The body's opening for a branch that is not plainly verified: GitHub's warning alert, before anything."""
    verdict = unmarked(task.verdict)
    if verdict == "verified" and task.shown_verdict == task.verdict:
        return []
    headline = f"Not verified: {md.inline(task.shown_verdict)}."
    if verdict == "regressed" and (regressed := _regressed(task)):
        fails = "fails" if len(regressed) == 1 else "fail"
        said = md.inline(f"{counted(len(regressed), 'test')} that passed on the base {fails} with this change:")
        detail = f"{said} {_named(regressed)}."
    elif verdict == "verified":  # marked: the suite ran with the task's own version of its test infrastructure
        headline = "Verified with test infrastructure this change modified."
        detail = f"The suite ran with this branch's {_names(_infrastructure(task))}."
    else:
        detail = md.inline(f"{reason_line(task)}.")
    return ["> [!WARNING]", f"> **{headline}** {detail} Read the evidence before merging.", ""]


def _infrastructure(task: TaskSummary) -> list[str]:
    return task.tests.test_infrastructure if task.tests is not None else []


def _verdict_notes(task: TaskSummary) -> list[str]:
    """The risks the verdict itself carries, first among the risk notes."""
    verdict = unmarked(task.verdict)
    rounds = task.tests.repair_rounds if task.tests is not None else 0
    repairs = f" ({counted(rounds, 'repair round')} did not fix it)" if rounds else ""
    if verdict == "regressed":
        notes = [
            f"Regressed: {md.code(test)} passed on the base and fails here{repairs}."
            for test in _regressed(task)[:NAMED_REGRESSIONS]
        ]
        if len(_regressed(task)) > NAMED_REGRESSIONS:
            notes.append(f"... and {len(_regressed(task)) - NAMED_REGRESSIONS} more regressed tests.")
        syntax = task.tests.syntax_errors if task.tests is not None else []
        return notes + [f"No longer parses: {md.code(error)}." for error in syntax]
    if verdict == "verified":
        return []
    return [f"Not verified ({md.inline(verdict)}): {md.inline(reason_line(task))}."]


def risk_notes(change: TaskChange) -> list[str]:
    paths = [file.path for file in change.files]
    task = change.ref.task
    infrastructure = _infrastructure(task)
    notes = _verdict_notes(task)
    if infrastructure:
        notes.append(
            f"Changes the test infrastructure its verdict rests on: {_names(infrastructure)}. The suite ran with "
            "the task's version of these files: read them before trusting the verdict."
        )
    others = [path for path in paths if path not in infrastructure]
    if tests := [path for path in others if is_test_file(path)]:
        notes.append(f"Changes tests: {_names(tests)}. Check that they still test what they did.")
    if config := [path for path in others if is_config_file(path)]:
        notes.append(f"Changes configuration, build or CI: {_names(config)}.")
    if change.deleted:
        notes.append(f"Deletes files: {_names(change.deleted)}.")
    if task.uncommitted_files:
        listed = ", ".join(f"{md.code(path)} ({md.inline(why)})" for path, why in task.uncommitted_files.items())
        notes.append(f"Files left out of the commit: {listed}.")
    if change.cut_note:
        notes.append(f"A large change: the file list below covers {change.cut_note} of the diff.")
    return notes


def _names(paths: list[str]) -> str:
    return ", ".join(map(md.code, paths))


def _verdict(change: TaskChange) -> str:
    """Our verdict, before anything the model wrote: with the gate's reason when verified, else why it is not."""
    task = change.ref.task
    return f"**Verdict: {md.inline(task.shown_verdict)}**: {md.inline(verdict_reason(task))}"


def _evidence(change: TaskChange) -> list[str]:
    task = change.ref.task
    if task.tests is None:
        return ["- Tests: none were run for this task."]
    lines = [f"- Tests: {md.inline(tests_cell(task))}"]
    if task.tests.repair_rounds:
        lines.append(f"- Repair rounds: {task.tests.repair_rounds}")
    for kind, names in evidence_lines(task):
        lines.append(f"- {md.inline(kind[:1].upper() + kind[1:])}: " + _names(names))
    return lines


def pull_request(change: TaskChange, config: RunConfig | None) -> tuple[str, str]:
    """(title, body): the body opens with our verdict; the model's message follows as a block nothing in it can
    close, then our evidence."""
    task, run = change.ref.task, change.ref.run
    body = [*warning(task), _verdict(change), "", "## What changed and why", "", "In the model's words:", ""]
    body += [md.fenced(change.body or change.title), ""]
    body += ["## Test evidence", "", *_evidence(change), ""]
    body += ["## Files touched", ""]
    if change.files:
        body += ["| file | + | - |", "| --- | ---: | ---: |"]
        body += [f"| {md.code(file.path, in_table=True)} | {file.added} | {file.removed} |" for file in change.files]
    else:
        body.append("No files changed.")
    notes = risk_notes(change)
    body += [
        "",
        "## Risk notes",
        "",
        *(
            [f"- {note}" for note in notes]
            or ["- None found (verified; no tests, configuration or deletions touched)."]
        ),
    ]
    effort = f", reasoning effort {md.code(config.llm.effort)}" if config else ""
    made = [
        f"- refactor-agent run {md.code(run.run_id)}, task {task.index}: {md.inline(task.task)}",
        f"- Model: {md.code(run.summary.model)}{effort}",
        f"- Branch {md.code(task.branch or '-')}" + (f", commit {md.code(change.tip)}" if change.tip else ""),
        f"- {counted(task.turns, 'model turn')}, {task.wall_time_s:.0f}s",
    ]
    body += ["", "## How this was made", "", *made]
    return change.title, "\n".join(body) + "\n"


def pull_request_markdown(change: TaskChange, config: RunConfig | None) -> str:
    title, body = pull_request(change, config)
    return f"# {md.inline(title)}\n\n{body}"
