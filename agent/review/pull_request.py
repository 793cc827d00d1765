"""A pull-request description in Markdown for one task's branch: `gh pr create --body-file` or GitLab's
`glab mr create --description "$(cat FILE)"` take it as it is."""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import PurePosixPath

from agent.config import RunConfig
from agent.morning_report import evidence_lines, markdown_cell, tests_cell
from agent.review.change import TaskChange

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


def _code(path: str) -> str:
    """A path as inline code; a backtick in it would end the span early."""
    return "`" + path.replace("`", "'") + "`"


def risk_notes(change: TaskChange) -> list[str]:
    paths = [file.path for file in change.files]
    notes = []
    if tests := [path for path in paths if is_test_file(path)]:
        notes.append(f"Changes tests: {', '.join(map(_code, tests))}. Check that they still test what they did.")
    if config := [path for path in paths if is_config_file(path)]:
        notes.append(f"Changes configuration, build or CI: {', '.join(map(_code, config))}.")
    if change.deleted:
        notes.append(f"Deletes files: {', '.join(map(_code, change.deleted))}.")
    uncommitted = change.ref.task.uncommitted_files
    if uncommitted:
        listed = ", ".join(f"{_code(path)} ({why})" for path, why in uncommitted.items())
        notes.append(f"Files the task made that were left out of the commit: {listed}.")
    if change.cut_note:
        notes.append(f"A large change: the file list below covers {change.cut_note} of the diff.")
    return notes


def _evidence(change: TaskChange) -> list[str]:
    task = change.ref.task
    lines = [f"- Verdict: **{task.verdict}**: {task.reason}"]
    if task.tests is None:
        return [*lines, "- Tests: none were run for this task."]
    lines.append(f"- Tests: {tests_cell(task)}")
    if task.tests.repair_rounds:
        lines.append(f"- Repair rounds: {task.tests.repair_rounds}")
    for kind, names in evidence_lines(task):
        lines.append(f"- {kind[:1].upper()}{kind[1:]}: " + ", ".join(map(_code, names)))
    return lines


def pull_request(change: TaskChange, config: RunConfig | None) -> tuple[str, str]:
    """(title, body)."""
    task, run = change.ref.task, change.ref.run
    body = ["## What changed and why", "", change.body or change.title, ""]
    body += ["## Test evidence", "", *_evidence(change), ""]
    body += ["## Files touched", ""]
    if change.files:
        body += ["| file | + | - |", "| --- | ---: | ---: |"]
        body += [f"| {markdown_cell(_code(file.path))} | {file.added} | {file.removed} |" for file in change.files]
    else:
        body.append("No files changed.")
    notes = risk_notes(change)
    body += [
        "",
        "## Risk notes",
        "",
        *([f"- {note}" for note in notes] or ["- None found (no tests, configuration or deletions touched)."]),
    ]
    made = [
        f"- refactor-agent run `{run.run_id}`, task {task.index}: {task.task}",
        f"- Model: `{run.summary.model}`" + (f", reasoning effort `{config.llm.effort}`" if config else ""),
        f"- Branch `{task.branch}`" + (f", commit `{change.tip}`" if change.tip else ""),
        f"- {task.turns} model turns, {task.wall_time_s:.0f}s",
    ]
    body += ["", "## How this was made", "", *made]
    return change.title, "\n".join(body) + "\n"


def pull_request_markdown(change: TaskChange, config: RunConfig | None) -> str:
    title, body = pull_request(change, config)
    return f"# {title}\n\n{body}"
