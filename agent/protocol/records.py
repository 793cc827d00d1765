"""summary.json: what the morning reviewer reads first."""

from __future__ import annotations

import signal
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, computed_field

from agent.protocol.stats import MetricsSummary

# A verdict the task's own test infrastructure helped to reach (agent.gate.infrastructure) is shown marked, in
# every view and in the trailer: `verified*`. The verdict itself stays one of the enum's values.
INFRASTRUCTURE_MARK = "*"


def marked(verdict: str, test_infrastructure: list[str]) -> str:
    """The verdict as it is shown: `verified*` when the task changed the test infrastructure it rests on."""
    return f"{verdict}{INFRASTRUCTURE_MARK}" if test_infrastructure else verdict


def unmarked(verdict: str) -> str:
    return verdict.removesuffix(INFRASTRUCTURE_MARK)


def now_iso() -> str:
    """Local time with its offset: the reviewer reads it against their own clock."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


TaskStatus = Literal["committed", "no_changes", "failed", "interrupted", "timed_out", "skipped"]
# running: the process is at work, or was killed (kill -9, a reboot) and the run can be resumed.
# failed: something outside any task stopped the run (the reason is in `error`); the tasks left can be resumed.
RunStatus = Literal["running", "completed", "interrupted", "failed"]
# Beside the status, what the gate found: the tests' word on the work (no_changes and failed carried over).
Verdict = Literal["verified", "unverified", "regressed", "no_changes", "failed", "interrupted", "timed_out", "skipped"]


class GateEvidence(BaseModel):
    """The gate's evidence for a task: the suite before and after, and what changed between them."""

    baseline: str | None = None
    final: str | None = None
    regressed: list[str] = []
    removed: list[str] = []
    fixed: list[str] = []
    flaky: list[str] = []
    still_failing: list[str] = []
    syntax_errors: list[str] = []
    # Test infrastructure the task changed (conftest.py, pytest configuration, ...): the suite ran it as changed.
    test_infrastructure: list[str] = []
    repair_rounds: int = 0
    unimportable: list[str] = []  # test modules that imported at baseline and do not now
    renamed: dict[str, str] = {}  # baseline ids whose parameters changed between runs (the time): old -> new
    failures: dict[str, str] = {}  # each regressed test -> the first lines of its failure, as the gate gave them
    rounds: list[int] = []  # the regressed count of each gate check, in order: the repair history


EnvironmentStatus = Literal["built", "reused", "as_is", "failed"]


class EnvironmentRecord(BaseModel):
    """The repository's environment for this run: where it came from, the image the tasks ran in, and, when its
    build failed, the step, the tail of its output and the log (the tasks then run unverified)."""

    repo: str = ""
    source: str
    description: str
    image: str
    status: EnvironmentStatus
    log: str | None = None
    build_s: float | None = None
    tests_collected: int | None = None
    collect_note: str = ""
    # The command the gate runs the tests with, and why that one: `--test-cmd`, `tox.ini [testenv] commands`, ...
    test_command: str | None = None
    test_command_source: str = ""

    def image_for_tasks(self, bare_image: str) -> str:
        """A failed environment leaves the bare image for the model's work (and the gate nothing to verify with)."""
        return bare_image if self.status == "failed" else self.image

    def unavailable(self) -> str | None:
        """Why the suite cannot run at all in this environment: its build failed."""
        return (self.error or "the environment build failed") if self.status == "failed" else None

    error: str | None = None
    failed_step: str | None = None
    log_tail: list[str] = []
    sources: list[str] = []  # what the environment was made from
    skipped: list[str] = []  # sources found and not used, each with the reason


class CompactionRecord(BaseModel):
    """One compaction of a task's conversation, as the report shows it (the transcript's event has the rest)."""

    turn: int
    stage: Literal["stubs", "summary"]
    reason: Literal["threshold", "overflow", "window"]
    tokens_before: int
    tokens_after: int

    def describe(self) -> str:
        """`turn 14: older results stubbed (past the threshold), 3,512 → 2,341 tokens`, as every view says it."""
        what = "older results stubbed" if self.stage == "stubs" else "older turns summarised"
        why = {
            "threshold": "past the threshold",
            "overflow": "the server's window overflowed",
            "window": "a reply filled the window",
        }[self.reason]
        return f"turn {self.turn}: {what} ({why}), {self.tokens_before:,} → {self.tokens_after:,} tokens"


class TaskSummary(BaseModel):
    index: int
    task: str
    repo: str | None = None  # the repository the task ran in (a night has several)
    status: TaskStatus
    verdict: Verdict = "failed"
    reason: str
    branch: str | None = None
    base_commit: str | None = None
    commit: str | None = None
    summary: str = ""
    turns: int = 0
    wall_time_s: float = 0.0
    tests: GateEvidence | None = None
    metrics: MetricsSummary | None = None
    compactions: list[CompactionRecord] = []  # the conversation compacted to fit the server's window
    warnings: list[str] = []
    # Files the commit left out (too large, new or tracked and grown; a nested repository): why.
    uncommitted_files: dict[str, str] = {}
    rejected_calls: dict[str, int] = {}  # tool name -> its results that were errors: why a failed task failed
    last_error: str = ""  # the first line of the last rejected call's result
    lost: Literal["server", "sandbox"] | None = None  # infrastructure the task lost: failed, never no_changes
    capped: int | None = None  # tokens of a reply cut at its cap with no tool call
    model: str | None = None  # the model the task's server says it runs (a fleet's servers may differ)
    key: str | None = None  # a named night's task: its identity across nights (agent/nights/identity.py)
    published: str | None = None  # the night's stable branch the result was published on (`branch` names it too)

    @property
    def shown_verdict(self) -> str:
        """The verdict as every view shows it: `verified*` when the task changed the test infrastructure it rests on."""
        return marked(self.verdict, self.tests.test_infrastructure if self.tests is not None else [])


class KindTally(BaseModel):
    """A kind of task (agent/nights/kinds.py) in a repository's task record: what became of its tasks."""

    kind: str
    merged: int = 0
    discarded: int = 0
    waiting: int = 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def merge_rate(self) -> float | None:
        """merged / (merged + discarded): of the tasks a reviewer decided on, the share merged (None: none yet).
        Waiting, failing and archived tasks are not decided, so they do not count."""
        decided = self.merged + self.discarded
        return self.merged / decided if decided else None


class RepoFates(BaseModel):
    """One repository's "since last night" in a named night's report: branches by what the night did with them
    (agent/nights/fates.py), and the record's tally per kind of task."""

    repo: str
    default_branch: str
    base: str
    previous_base: str | None = None
    skipped: str | None = None  # the repository was skipped tonight (a predicate's reason)
    new: list[str] = []  # first published tonight
    updated: list[str] = []  # run again with the model, the branch replaced
    rebased: list[str] = []  # replayed onto the new base without the model
    unchanged: list[str] = []  # kept, or not run tonight (--only failed)
    no_changes: list[str] = []  # nothing to change any more: the branch was deleted
    retired: list[str] = []  # merged
    discarded: list[str] = []
    archived: list[str] = []  # left the night file
    queued: list[str] = []  # held back for a later night (max_open)
    outside: list[str] = []  # changed outside refactor-agent, or checked out: left alone
    unfinished: list[str] = []  # planned to run, not finished (stopped): `resume` goes on
    failing: dict[str, int] = {}  # branch -> consecutive nights failing
    kinds: list[KindTally] = []


class RunSummary(BaseModel):
    run_id: str
    repo: str  # the first repository; `repos` lists all of a night's
    repos: list[str] = []
    model: str  # the requested name
    served_model: str | None = None  # the model the server says it runs (/props)
    server_url: str
    speculation_configured: bool = False
    started_at: str = Field(default_factory=now_iso)
    ended_at: str | None = None
    status: RunStatus = "running"
    resumed: int = 0  # times the run was continued with `resume`
    interrupted_by: str | None = None  # the signal's name, e.g. SIGTERM
    error: str | None = None  # why a failed run stopped: one line
    environments: list[EnvironmentRecord] = []  # one per repository, in the order their first tasks ran
    tasks: list[TaskSummary] = []
    wall_time_s: float = 0.0
    metrics: MetricsSummary | None = None
    warnings: list[str] = []
    superseded_by: str | None = None  # a named night's unfinished run whose tasks a later night planned again
    fates: list[RepoFates] = []  # a named night's "since last night", per repository (a one-off run: none)
    removed: list[str] = []  # what the night's gc removed, one line each, then its total

    @property
    def exit_code(self) -> int:
        if self.interrupted_by is not None:  # as a shell reports a process that a signal ended
            return 128 + signal.Signals[self.interrupted_by].value
        if self.status == "failed":
            return 1
        return 1 if any(task.verdict in ("failed", "regressed", "timed_out") for task in self.tasks) else 0

    @property
    def environment(self) -> EnvironmentRecord | None:
        """The first repository's environment: the one of a one-repository run."""
        return self.environments[0] if self.environments else None
