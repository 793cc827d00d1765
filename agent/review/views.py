"""What review prints: a line per run, a run's task table, one task's evidence; and the same as JSON."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from agent.nights.fates import FatesTable
from agent.record.reasons import verdict_reason, verdict_word
from agent.record.report import (
    VERDICT_COLOURS,
    base_failure_lines,
    evidence_lines,
    file_changes,
    merge_rate,
    performance_row,
    rejected_calls,
    repair_history,
    reviewer_row,
    since_text,
    task_figures,
    tests_cell,
    verdict_counts,
    verdict_tally,
    why_lines,
)
from agent.review.change import TaskChange
from agent.review.records import RunRecord
from agent.safety.printable import counted, rich_text

# The column that gives way when the terminal is narrow: cut with an ellipsis, never wrapped (one line per task).
SHRINKING_COLUMN = "task"


def run_line(record: RunRecord) -> str:
    summary = record.summary
    state = "" if summary.ended_at else "  (running or cut short)"
    return (
        f"{summary.run_id}  {summary.repo}  {counted(len(summary.tasks), 'task')}  {verdict_counts(summary)}"
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


def run_table(
    record: RunRecord, branch_states: dict[int, str] | None = None, stable: dict[int, str] | None = None
) -> Group:
    """The reviewer's table (`#  verdict  task  tests Δ  files ±`, one line per task, readable at 80 columns), then
    what already failed on the base and why each task that is not verified is so; a named night's "since last
    night" and its branches' state now (`stable`). With `branch_states` (--wide): the operator's columns and each
    branch's state too."""
    stable = stable or {}
    summary = record.summary
    diffs = record.diffs()
    title = f"run {record.run_id}  {summary.repo}  {counted(len(summary.tasks), 'task')}: {verdict_counts(summary)}"
    # A line of its own, not the table's title: that would wrap at the table's width, not the terminal's.
    table = Table(box=None)
    rows = []
    for task in summary.tasks:
        row = reviewer_row(task, file_changes(diffs.get(task.index, "")))
        if branch_states is not None:
            row |= performance_row(task, branch_states.get(task.index, "-"))
        rows.append(row)
    for column in rows[0] if rows else ("#", "verdict", "task"):
        table.add_column(column, no_wrap=column != SHRINKING_COLUMN)
    for task, row in zip(summary.tasks, rows, strict=True):
        colour = f"bold {VERDICT_COLOURS.get(task.verdict, '')}"
        cells = [rich_text(value, colour if column == "verdict" else "") for column, value in row.items()]
        for cell, column in zip(cells, row, strict=True):
            if column == SHRINKING_COLUMN and branch_states is None:  # --wide makes no promise on width: it wraps
                cell.no_wrap, cell.overflow = True, "ellipsis"
        table.add_row(*cells)
    notes = [*base_failure_lines(summary), *why_lines(summary)]
    since = since_text(summary)
    named = [
        (task.branch, stable[task.index])
        for task in summary.tasks
        if task.branch and stable.get(task.index, "-") != "-"
    ]
    width = max((len(branch) for branch, _ in named), default=0)
    now = [f"  {branch:<{width}}  {state}" for branch, state in named]
    # Text, never markup: a `[/]` in a repository's path or a task would otherwise end the command.
    return Group(
        rich_text(title),
        table,
        *([Text("")] if notes else []),
        *map(rich_text, notes),
        *([Text("")] if since else []),
        *map(rich_text, since),
        *([Text(""), Text("branches now:")] if now else []),
        *map(rich_text, now),
    )


def fates_view(fates: FatesTable) -> Group:
    """`review fates`: per task its branch, kind, fate and nights open; per kind of task what became of its tasks
    and the merge rate."""
    tasks = Table(box=None)
    for column in ("branch", "kind", "fate", "nights open"):
        tasks.add_column(column, no_wrap=column != "branch")
    for row in fates.tasks:
        fate = f"{row.fate} ({counted(row.failing_nights, 'night')})" if row.fate == "failing" else row.fate
        tasks.add_row(*map(rich_text, (row.branch, row.kind, fate, str(row.nights_open))))
    nights = f"night {fates.nights[0]}" if len(fates.nights) == 1 else f"nights {', '.join(fates.nights) or 'none'}"
    title = f"{fates.repo}: {counted(len(fates.tasks), 'task')} of {nights}\ntask record: {fates.record}"
    kinds = [merge_rate(tally) for tally in fates.kinds]
    return Group(
        rich_text(title),
        tasks,
        Text(""),
        Text("per kind (merge rate: merged / (merged + discarded)):"),
        *(rich_text(f"  {line}") for line in kinds),
    )


def evidence_text(change: TaskChange) -> str:
    """Everything `show` prints before the diff (printable() still to be applied)."""
    task, run = change.ref.task, change.ref.run
    lines = [
        f"task {task.index} of run {run.run_id}: {task.task}",
        f"branch: {task.branch or '-'}" + (f"  commit: {change.tip}" if change.tip else ""),
        f"verdict: {verdict_word(task)}: {verdict_reason(task)}",
    ]
    if (rejected := rejected_calls(task)) is not None:
        lines.append(f"rejected tool calls: {rejected}")
    if task.tests is not None:
        lines.append(f"tests: {tests_cell(task)}")
        if (history := repair_history(task)) is not None:
            lines.append(f"repair history: {history}")
        for test, failure in task.tests.failures.items():
            lines += [f"failure of {test}:", *(f"    {line}" for line in failure.splitlines())]
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
