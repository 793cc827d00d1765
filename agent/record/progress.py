"""What a run that stopped (kill -9, an OOM kill, a reboot) had done, read back from its transcript.

Tasks with a task_end event are finished and not redone. The task in flight continues: its conversation is
rebuilt from the request events (each carries the messages that were new since the previous request, exactly as
sent, so the rebuilt prefix is byte-identical and the server's KV cache still matches), then the last response
and the tool results that arrived after it. A compaction event replaces the conversation rebuilt so far with the
compacted one it carries (the system message, which it leaves out, stays). A tool call without a result was cut off
by the process's death: it gets a result saying so, and is never run again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.protocol.config import NightConfig
from agent.protocol.events import Compaction, Request, Response, TaskEnd, TaskStart, ToolResultEvent, parse_event
from agent.protocol.records import CompactionRecord, RunSummary, TaskSummary
from agent.protocol.stats import RequestStats
from agent.record.journal import NIGHT_RECORD, run_directories

RESTARTED_MESSAGE = (
    "The agent process was restarted (it was killed, or the machine rebooted) and this is a new sandbox: "
    "processes you started and files outside the repository are gone, and so are files git ignores (build "
    "outputs, installed packages). The repository's other files are as your last completed tool call left them. "
    "Go on with the task from where you were."
)
CUT_OFF_RESULT = (
    "interrupted: the agent process stopped while this tool call was running, so it has no result and it was not "
    "run again. Its changes to files may or may not have been kept: check before relying on them."
)


@dataclass
class TaskProgress:
    """The task in flight when the process stopped."""

    index: int
    start: TaskStart
    messages: list[dict[str, Any]] = field(default_factory=list)
    recorded: int = 0  # how many of `messages` the transcript's request events hold
    turn: int = 0
    requests: list[RequestStats] = field(default_factory=list)
    compactions: list[CompactionRecord] = field(default_factory=list)
    cut_off_calls: int = 0


@dataclass
class RunProgress:
    finished: list[TaskSummary]
    # Started and not finished, by task index: one when tasks run one at a time, several with a fleet.
    in_flight: dict[int, TaskProgress] = field(default_factory=dict)
    requests: list[RequestStats] = field(default_factory=list)  # of the finished tasks, for the run's metrics


def _events(transcript: Path) -> list[Any]:
    """Every event; a line cut short by the kill (the last one) is dropped."""
    events = []
    try:
        lines = transcript.read_bytes().splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            events.append(parse_event(line))
        except ValidationError:
            continue
    return events


def read_progress(transcript: Path) -> RunProgress:
    events = _events(transcript)
    finished = {event.outcome.index: event.outcome for event in events if isinstance(event, TaskEnd)}
    done = sorted(finished.values(), key=lambda task: task.index)
    requests = [event.stats for event in events if isinstance(event, Response) and event.task in finished]
    first_starts: dict[int, TaskStart] = {}  # a task resumed before has a start per session: its first counts
    for event in events:
        if isinstance(event, TaskStart) and event.task not in finished:
            first_starts.setdefault(event.task or 0, event)
    in_flight = {index: _task_progress(events, start) for index, start in first_starts.items()}
    return RunProgress(done, in_flight, requests)


def _task_progress(events: list[Any], start: TaskStart) -> TaskProgress:
    """Where a task that was not finished stood: its conversation so far, tool results the kill cut off marked."""
    progress = TaskProgress(index=start.task or 0, start=start)
    response: dict[str, Any] | None = None
    results: dict[str, str] = {}
    for event in events:
        if event.task != progress.index:
            continue
        if isinstance(event, Request):
            progress.messages.extend(event.new_messages)
            progress.turn, response, results = event.turn, None, {}
        elif isinstance(event, Response):
            response = event.message
            progress.requests.append(event.stats)
        elif isinstance(event, ToolResultEvent) and response is not None:
            results[event.id] = event.text
        elif isinstance(event, Compaction):
            # The compacted conversation holds the last response and its results: nothing is pending after it.
            progress.messages = [*progress.messages[:1], *event.messages]
            response, results = None, {}
            progress.compactions.append(event.record())
            if event.summary_stats is not None:
                progress.requests.append(event.summary_stats)
    progress.recorded = len(progress.messages)
    if response is not None:
        progress.messages.append(response)
        for call in response.get("tool_calls") or []:
            text = results.get(call["id"])
            if text is None:
                progress.cut_off_calls += 1
            content = CUT_OFF_RESULT if text is None else text
            progress.messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    return progress


# Runs a resume may continue: killed while running (the summary still says so), stopped by a signal, or failed
# outside its tasks (the fault mended since).
RESUMABLE = ("running", "interrupted", "failed")


class ResumeError(Exception):
    """str() is the one line the user sees."""


def load_run_night(run_dir: Path) -> NightConfig:
    """The settings of the run in `run_dir`, for resume."""
    try:
        night = NightConfig.model_validate_json((run_dir / NIGHT_RECORD).read_bytes())
        summary = RunSummary.model_validate_json((run_dir / "summary.json").read_bytes())
    except FileNotFoundError as error:
        raise ResumeError(f"{run_dir}: not a run directory ({Path(str(error.filename)).name} is missing)") from None
    except ValueError as error:
        raise ResumeError(f"{run_dir}: its record is unreadable: {error.__class__.__name__}") from None
    if summary.superseded_by is not None:
        raise ResumeError(
            f"run {run_dir.name} was superseded by night {summary.superseded_by}: its tasks were planned again"
        )
    unfinished = summary.status == "running" or len(summary.tasks) < len(night.tasks())
    if summary.status not in RESUMABLE or not unfinished:
        raise ResumeError(f"run {run_dir.name} is {summary.status}: nothing to resume")
    return night


def _work(night: NightConfig) -> list[tuple[Path, str]]:
    return [(config.repo, task) for config, task in night.tasks()]


def unfinished_run(night: NightConfig) -> str | None:
    """The newest run of the same night file (or the same repositories and tasks) that can be resumed."""
    for run_dir in reversed(run_directories(night.runs_dir)):
        try:
            earlier = load_run_night(run_dir)
        except ResumeError:
            continue
        same = (
            earlier.night_file == night.night_file
            if night.night_file is not None
            else earlier.night_file is None and _work(earlier) == _work(night)
        )
        if same:
            return run_dir.name
    return None
