"""What became of a night's tasks: the report's "since last night" per repository (from the night's plan and the
task record after it), the tally per kind of task with its merge rate, and the task record read for
`review fates` (no-follow, bounded, never rebuilt: a reader only)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import git
from pydantic import BaseModel, ValidationError

from agent.nights.errors import NightError
from agent.nights.plan import record_key, record_store
from agent.nights.record import MAX_RECORD_BYTES, record_path
from agent.protocol.nights import NightPlan, PlannedTask, RepoPlan, TaskKey, TaskRecord, TaskRecordFile
from agent.protocol.records import KindTally, RepoFates, now_iso
from agent.worktree.safe_git import SafeGit
from agent.worktree.workspace import user_git

# The decisions that tell a task's fate by themselves (the others, `run` and `rebase`, by what the night made).
_BY_ACTION = {"archive": "archived", "retire": "retired", "leave": "outside", "wait": "queued", "keep": "unchanged"}


def kind_tallies(tasks: list[TaskRecord]) -> list[KindTally]:
    """Per kind (in the order kinds first appear): how many of its tasks were merged, discarded, are waiting."""
    tallies: dict[str, KindTally] = {}
    for task in tasks:
        tally = tallies.setdefault(task.kind, KindTally(kind=task.kind))
        if task.fate in ("merged", "discarded", "waiting"):
            setattr(tally, task.fate, getattr(tally, task.fate) + 1)
    return list(tallies.values())


def _of_night(record: TaskRecordFile, night: str) -> list[TaskRecord]:
    return [task for key, task in record.tasks.items() if key.startswith(f"{night}/")]


def _settled_before(planned: PlannedTask, task: TaskRecord | None, run_id: str) -> bool:
    """Retired, archived or discarded on an earlier night and so again tonight: listed the night it happened only."""
    if task is None or not (planned.action in ("retire", "archive") or task.fate == "discarded"):
        return False
    earlier = [outcome for outcome in task.outcomes if outcome.run_id != run_id]
    return bool(earlier) and earlier[-1].action == planned.action


def _place(fates: RepoFates, planned: PlannedTask, task: TaskRecord | None, run_id: str) -> None:
    branch = planned.branch
    if _settled_before(planned, task, run_id):
        return
    if planned.action in _BY_ACTION:
        getattr(fates, _BY_ACTION[planned.action]).append(branch)
        return
    if planned.action == "skip":  # discarded, or not tonight's (--only failed, the repository skipped)
        (fates.discarded if task is not None and task.fate == "discarded" else fates.unchanged).append(branch)
        return
    tonight = [outcome for outcome in task.outcomes if outcome.run_id == run_id] if task is not None else []
    if task is None or not tonight:
        fates.unfinished.append(branch)
    elif tonight[-1].tip is not None:
        made = fates.rebased if planned.action == "rebase" else fates.new if task.first_run == run_id else fates.updated
        made.append(branch)
    elif tonight[-1].status == "no_changes":
        fates.no_changes.append(branch)
    elif task.fate == "outside":
        fates.outside.append(branch)
    else:
        fates.failing[branch] = max(task.failing_nights, 1)


def repo_fates(plan: NightPlan, repo: RepoPlan, record: TaskRecordFile) -> RepoFates:
    fates = RepoFates(
        repo=repo.repo,
        default_branch=repo.default_branch,
        base=repo.base,
        previous_base=repo.previous_base,
        skipped=repo.skipped,
        kinds=kind_tallies(_of_night(record, plan.night)),
    )
    for planned in repo.tasks:
        _place(fates, planned, record.tasks.get(planned.key), plan.run_id)
    return fates


def since_last_night(plan: NightPlan, records: dict[str, TaskRecordFile]) -> list[RepoFates]:
    """`records`: each repository's task record after the night, by the repository's path as the plan has it."""
    return [repo_fates(plan, repo, records[repo.repo]) for repo in plan.repos if repo.repo in records]


def read_record(path: Path) -> TaskRecordFile:
    """The record as it is on disk: NightError (one line) when it is missing, a link, too large or does not
    parse."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise NightError(f"no task record at {path}: no named night has run on this repository") from None
    except OSError as error:
        raise NightError(f"task record {path}: {error.strerror}") from None
    with os.fdopen(descriptor, "rb") as file:
        data = file.read(MAX_RECORD_BYTES + 1)
    if len(data) > MAX_RECORD_BYTES:
        raise NightError(f"task record {path} is larger than {MAX_RECORD_BYTES} bytes")
    try:
        return TaskRecordFile.model_validate_json(data)
    except ValidationError as error:
        raise NightError(
            f"task record {path} does not parse ({error.error_count()} errors): the next night rebuilds it"
        ) from None


class FateRow(BaseModel):
    """A task of the record as `review fates` shows it."""

    key: str
    branch: str
    kind: str
    fate: str
    nights_open: int
    failing_nights: int
    merged_by: str | None = None
    discarded_at: str | None = None
    last_run: str


class FatesTable(BaseModel):
    """`review fates --json`."""

    repo: str
    record: str
    nights: list[str]
    tasks: list[FateRow]
    kinds: list[KindTally]  # with merge_rate: merged / (merged + discarded), None when none is decided yet


def fates_table(record: TaskRecordFile, path: Path) -> FatesTable:
    tasks = list(record.tasks.values())
    return FatesTable(
        repo=record.work_tree,
        record=str(path),
        nights=sorted(record.nights),
        tasks=[FateRow.model_validate(task.model_dump(include=set(FateRow.model_fields))) for task in tasks],
        kinds=kind_tallies(tasks),
    )


def night_fates(
    plan: NightPlan, runs_dir: Path, repos: dict[Path, git.Repo], hooks_dir: Path, log: Callable[[str], None]
) -> list[RepoFates]:
    """The night's "since last night", read from each repository's task record once the night is over."""
    records = {}
    for repo in plan.repos:
        path = Path(repo.repo)
        safe_git = user_git(repos[path], hooks_dir)
        records[repo.repo] = record_store(runs_dir, repos[path], safe_git, plan.night, {}, plan.run_id, log).load()
    return since_last_night(plan, records)


def record_of(runs_dir: Path, repo: git.Repo) -> Path:
    """Where a repository's task record is (record_store's file)."""
    return record_path(runs_dir, record_key(repo))


def record_discards(
    runs_dir: Path, repo: git.Repo, safe_git: SafeGit, branches: dict[TaskKey, str], log: Callable[[str], None]
) -> list[str]:
    """`review discard` of a named night's branches: their tasks' fate is discarded in the record (under its
    lock), so the next night skips them. Only an existing record is written; returns the branches recorded."""
    if not branches or not record_of(runs_dir, repo).is_file():
        return []
    recorded: list[str] = []
    night = next(iter(branches)).partition("/")[0]

    def change(record: TaskRecordFile) -> None:
        for key, branch in branches.items():
            task = record.tasks.get(key)
            if task is not None and task.branch == branch:
                task.fate, task.discarded_at = "discarded", now_iso()
                recorded.append(branch)

    record_store(runs_dir, repo, safe_git, night, {}, "review discard", log).update(change)
    return recorded
