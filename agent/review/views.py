"""What review prints: a line per run, a run's task table, one task's evidence; and the same as JSON."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from agent.record.report import (
    VERDICT_COLOURS,
    evidence_lines,
    file_changes,
    task_figures,
    tests_cell,
    verdict_counts,
    verdict_tally,
)
from agent.review.change import TaskChange
from agent.review.records import RunRecord
from agent.safety.printable import rich_text

WRAPPED_COLUMNS = ("task", "tests")


def run_line(record: RunRecord) -> str:
    summary = record.summary
    state = "" if summary.ended_at else "  (running or cut short)"
    return (
        f"{summary.run_id}  {summary.repo}  {len(summary.tasks)} tasks  {verdict_counts(summary)}"
        f"  wall {summary.wall_time_s:.0f}s{state}"
    )


def run_json(record: RunRecord) -> dict[str, Any]:
    summary = record.summary
    return {
        "run_id": summary.run_id,
        "repo": summary.repo,
        "started_at": summary.started_at,
        "ended_at": summary.ended_at,
        "tasks": len(summary.tasks),
        "verdicts": verdict_tally(summary),
        "wall_time_s": summary.wall_time_s,
        "directory": str(record.directory),
    }


def task_rows(record: RunRecord) -> list[dict[str, str]]:
    """The report's row per task (morning_report.task_figures), with the same per-task diffs."""
    diffs = record.diffs()
    return [task_figures(task, file_changes(diffs.get(task.index, ""))) for task in record.summary.tasks]


def run_table(record: RunRecord) -> Table:
    rows = task_rows(record)
    # Text, never markup: a `[/]` in a repository's path or a task would otherwise end the command.
    table = Table(title=rich_text(f"run {record.run_id}  {record.summary.repo}"), title_justify="left")
    for column in rows[0] if rows else ("#", "task", "verdict"):
        # Names a reviewer copies (branch, commit) stay whole; prose wraps.
        table.add_column(column, overflow="fold", no_wrap=column not in WRAPPED_COLUMNS)
    for task, row in zip(record.summary.tasks, rows, strict=True):
        colour = f"bold {VERDICT_COLOURS.get(task.verdict, '')}"
        table.add_row(*(rich_text(value, colour if column == "verdict" else "") for column, value in row.items()))
    return table


def evidence_text(change: TaskChange) -> str:
    """Everything `show` prints before the diff (printable() still to be applied)."""
    task, run = change.ref.task, change.ref.run
    lines = [
        f"task {task.index} of run {run.run_id}: {task.task}",
        f"branch: {task.branch or '-'}" + (f"  commit: {change.tip}" if change.tip else ""),
        f"verdict: {task.shown_verdict}: {task.reason}",
    ]
    if task.tests is not None:
        lines.append(f"tests: {tests_cell(task)}")
        for kind, names in evidence_lines(task):
            lines += [f"{kind}:"] + [f"  {name}" for name in names]
    lines += [f"warning: {warning}" for warning in task.warnings]
    lines += [f"not committed: {path} ({why})" for path, why in task.uncommitted_files.items()]
    lines += ["", "commit message:", *(f"    {line}" for line in change.message.strip().splitlines()), ""]
    if change.cut_note:
        lines.append(f"diff ({change.cut_note}):")
    elif not change.diff:
        lines.append("no changes")
    return "\n".join(lines)


def change_json(change: TaskChange) -> dict[str, Any]:
    return {
        "run_id": change.ref.run.run_id,
        "task": change.ref.task.model_dump(mode="json"),
        "commit": change.tip,
        "message": change.message,
        "files": [{"path": f.path, "added": f.added, "removed": f.removed} for f in change.files],
        "deleted": change.deleted,
        "diff": change.diff,
        "diff_cut": change.cut_note or None,
    }
