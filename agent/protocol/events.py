"""Everything a run reports as it happens, as typed models: one line each in transcript.jsonl.

The journal writes them, the live view shows them, and later readers (the report, `review`, resume) parse them
back with `parse_event`. Every event carries the index of the task it belongs to (`task`; None for the run's
own events) and its time. Tagged by `type`, like Codex CLI's exec events.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from agent.protocol.records import CompactionRecord, EnvironmentRecord, TaskSummary
from agent.protocol.stats import RequestStats


def _now() -> float:
    return round(time.time(), 3)


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")

    time: float = Field(default_factory=_now)
    task: int | None = None


class EnvironmentProgress(_Event):
    type: Literal["environment_progress"] = "environment_progress"
    message: str


class EnvironmentReady(_Event):
    """The repository's environment image, reused or built (or why it could not be)."""

    type: Literal["environment"] = "environment"
    record: EnvironmentRecord


class RunStart(_Event):
    type: Literal["run_start"] = "run_start"
    run_id: str
    tasks: int
    deadline_at: float | None = None  # epoch seconds of the night's `until`: the live view's time left
    served_model: str | None = None  # the model the server says it runs (/props), beside the requested name


class RunEnd(_Event):
    type: Literal["run_end"] = "run_end"
    status: str
    signal: str | None = None
    exit_code: int
    wall_time_s: float


class TaskStart(_Event):
    type: Literal["task_start"] = "task_start"
    text: str
    branch: str
    repo: str | None = None
    base_commit: str | None = None  # what resume recreates the worktree from
    resumed: bool = False  # the task goes on after a restart of the process


class TaskServer(_Event):
    """Which server of a fleet (and which of its slots, with --parallel) a task's requests go to, and why: it holds
    the task's prefix, it is the least loaded, or the previous one stopped answering (the conversation continues
    on this one)."""

    type: Literal["task_server"] = "task_server"
    server: str
    slot: int | None = None
    reason: str


class TaskEnd(_Event):
    type: Literal["task_end"] = "task_end"
    outcome: TaskSummary


class Request(_Event):
    """What is new since the previous request: the repository is in the first one, not in every one."""

    type: Literal["request"] = "request"
    turn: int
    message_count: int
    new_messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None


class Response(_Event):
    type: Literal["response"] = "response"
    turn: int
    message: dict[str, Any]
    stats: RequestStats


class ToolCallEvent(_Event):
    type: Literal["tool_call"] = "tool_call"
    turn: int
    id: str
    name: str
    arguments: str


class ToolResultEvent(_Event):
    type: Literal["tool_result"] = "tool_result"
    turn: int
    id: str
    name: str
    is_error: bool
    text: str


class Compaction(_Event):
    """The conversation compacted to fit the server's window (agent/conversation/): what went and the tokens before
    and after. `messages` is the whole conversation after it but the system message, which never changes: resume
    rebuilds from it, and later requests extend it."""

    type: Literal["compaction"] = "compaction"
    turn: int
    stage: Literal["stubs", "summary"]  # older turns trimmed; or replaced by the model's handoff summary
    # The next request past the threshold; the server's exceed_context_size_error; a reply that filled the window.
    reason: Literal["threshold", "overflow", "window"]
    tokens_before: int
    tokens_after: int
    threshold: int
    n_ctx: int
    results_stubbed: int = 0
    reasoning_dropped: int = 0
    arguments_shortened: int = 0
    turns_dropped: int = 0
    chars_elided: int = 0
    summary_stats: RequestStats | None = None  # the handoff summary's request
    messages: list[dict[str, Any]]

    def record(self) -> CompactionRecord:
        return CompactionRecord(
            turn=self.turn,
            stage=self.stage,
            reason=self.reason,
            tokens_before=self.tokens_before,
            tokens_after=self.tokens_after,
        )


class Retry(_Event):
    type: Literal["retry"] = "retry"
    message: str


class PrefillProgress(_Event):
    type: Literal["prefill_progress"] = "prefill_progress"
    processed: int
    total: int
    cached: int = 0


class GenerationProgress(_Event):
    """Tokens of the reply streamed so far (content, reasoning and tool-call chunks), at most once a second."""

    type: Literal["generation_progress"] = "generation_progress"
    tokens: int
    elapsed_s: float  # since the reply's first token


class PrefixCacheEvent(_Event):
    """A saved KV cache of the task's prefix restored into the slot, or saved from it (agent.server.kv_cache)."""

    type: Literal["prefix_cache"] = "prefix_cache"
    action: Literal["restored", "saved", "waiting", "warning"]
    tokens: int = 0
    ms: float | None = None
    message: str


class Baseline(_Event):
    type: Literal["baseline"] = "baseline"
    ran: bool
    cached: bool
    result: str
    duration_s: float = 0.0


class GateStart(_Event):
    """The gate starts a run of the suite: the baseline, a check after the change, or a rerun of the regressed."""

    type: Literal["gate_start"] = "gate_start"
    kind: Literal["baseline", "check", "rerun"]
    tests: int | None = None  # baseline/check: the tests collected; rerun: the regressed count


class GateEvent(_Event):
    type: Literal["gate"] = "gate"
    verdict: str
    reason: str
    result: str | None = None
    regressed: list[str] = []
    syntax_errors: list[str] = []
    test_infrastructure: list[str] = []  # the verdict is shown marked (agent.protocol.records.marked)


class Repair(_Event):
    type: Literal["repair"] = "repair"
    round: int
    reason: str


Event = Annotated[
    RunStart
    | RunEnd
    | TaskStart
    | TaskServer
    | TaskEnd
    | Request
    | Response
    | ToolCallEvent
    | ToolResultEvent
    | Compaction
    | Retry
    | PrefillProgress
    | GenerationProgress
    | EnvironmentProgress
    | EnvironmentReady
    | PrefixCacheEvent
    | Baseline
    | GateStart
    | GateEvent
    | Repair,
    Field(discriminator="type"),
]
_EVENT = TypeAdapter(Event)


def parse_event(line: str | bytes) -> Event:
    """One transcript line back into its model; raises pydantic.ValidationError on anything else."""
    return _EVENT.validate_json(line)
