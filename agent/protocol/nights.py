"""A night file's tasks across nights: the task record (runs/.tasks/<repository-key>.json), a night's plan
(runs/<run-id>/plan.json) and what each night did with each task."""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict

from agent.protocol.effort import Effort
from agent.protocol.records import TaskStatus, Verdict

# "<night>/<id>" or "<night>/t-<sha256 of the words>[#<shard id>]": also the Refactor-Agent-Task trailer's value.
TaskKey = str
# What a night does with a task: run it with the model, rebase it without, keep it as it is, retire it (merged),
# skip it (discarded, --only failed), let it wait (max_open), archive it (left the night file), leave it (moved
# outside refactor-agent, or checked out).
Action = Literal["run", "rebase", "keep", "retire", "skip", "wait", "archive", "leave"]
Fate = Literal["waiting", "merged", "discarded", "failing", "no_changes", "queued", "archived", "outside"]
# Which check found a branch in the default branch (agent/nights/merged.py).
MergedBy = Literal["ancestor", "trailer", "patch_id", "contained", "empty_rebase"]


class Fingerprint(BaseModel):
    """What the user means and how the result is checked; not how hard the agent tries (max_turns, budgets,
    timeouts, sampling and the server are left out: changing them does not invalidate a good result)."""

    text: str | None = None  # the task's words, only when an `id` names the task (else they are its key)
    model: str
    effort: Effort
    test_cmd: str | None = None  # as configured; None: detected on each base
    image: str | None = None  # only an explicit --image
    environment: str | None = None  # sha256 of the [environment] table's JSON
    before: list[str] = []
    after: list[str] = []
    shard: str | None = None  # the shard's scope as the model is given it

    def digest(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]

    def changed(self, old: Fingerprint) -> str:
        """What differs from `old`, for the plan: `model a → b (and 1 more)`."""
        differences = [
            f"{name} {getattr(old, name)} → {getattr(self, name)}"
            for name in Fingerprint.model_fields
            if getattr(old, name) != getattr(self, name)
        ]
        if not differences:
            return "nothing"
        more = f" (and {len(differences) - 1} more)" if len(differences) > 1 else ""
        return differences[0] + more


class PushRecord(BaseModel):
    commit: str
    at: str


class NightOutcome(BaseModel):
    """One night's decision for a task and its result; a record keeps the newest keep_history of them."""

    run_id: str
    action: Action
    status: TaskStatus | None = None  # of the run, when it ran
    verdict: Verdict | None = None
    tip: str | None = None  # what was published, if anything
    reason: str


class TaskRecord(BaseModel):
    key: TaskKey
    text: str
    kind: str
    shard: str | None = None
    branch: str  # allocated once, for the task's life (agent/nights/identity.py)
    fingerprint: Fingerprint
    fate: Fate
    tip: str | None = None  # the commit refactor-agent last set the branch to
    base: str | None = None  # the default branch's commit that tip is based on
    status: TaskStatus | None = None  # of the last attempt
    verdict: Verdict | None = None
    merged_by: MergedBy | None = None
    first_run: str
    last_run: str
    nights_open: int = 0  # nights with fate waiting
    failing_nights: int = 0  # consecutive
    discarded_at: str | None = None
    pushed: dict[str, PushRecord] = {}  # by remote
    outcomes: list[NightOutcome] = []  # newest last


class PendingMove(BaseModel):
    """A ref transaction about to happen, written to the record first: after a kill -9 the next load settles it
    from git (done, never happened, or moved by someone else)."""

    key: TaskKey
    run_id: str
    branch: str
    old: str | None  # the stable branch's tip expected (None: it must not exist)
    new: str | None  # None: the branch is deleted (a task that no longer changes anything)
    work_branch: str | None
    history_ref: str | None  # None for a delete: the old tip has its own


class TaskRecordFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    work_tree: str
    git_dir: str
    nights: dict[str, str] = {}  # night name -> night file
    tasks: dict[TaskKey, TaskRecord] = {}
    pending: list[PendingMove] = []
    written_by: str  # a run id, or "review <subcommand>"


class PlannedTask(BaseModel):
    key: TaskKey
    branch: str  # the stable name
    text: str  # what the model gets (a shard's scope appended)
    action: Action
    reason: str
    index: int | None = None  # its number among the run's tasks (run and rebase only)
    previous_tip: str | None = None  # the stable tip the plan saw: the publish's expected old value
    conflicts: list[str] = []
    merged_by: MergedBy | None = None  # a retired task's: which check found it


class RepoPlan(BaseModel):
    repo: str
    record_key: str
    default_branch: str  # "origin/main", "main"
    default_source: Literal["remote HEAD", "checked out"]
    base: str  # the default branch's commit every task of the night starts from
    previous_base: str | None = None
    skipped: str | None = None  # a predicate's reason
    tasks: list[PlannedTask] = []


class NightPlan(BaseModel):
    """runs/<run-id>/plan.json: written before the run, read by `resume` (a resumed night is never planned
    again)."""

    night: str
    run_id: str
    only_failed: bool = False
    retry_discarded: bool = False
    superseded: str | None = None  # the unfinished earlier run this night replaces
    repos: list[RepoPlan]
