"""What a person watching the run sees: a live panel on a terminal, plain lines in a log or cron mail.

Reasons, test output, build output, task texts and server messages are someone else's text: every line and every
cell goes through agent.safety.printable (escape sequences shown, never obeyed; rich markup never parsed in them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from agent.protocol.events import (
    Baseline,
    EnvironmentProgress,
    EnvironmentReady,
    Event,
    GateEvent,
    PrefillProgress,
    PrefixCacheEvent,
    Repair,
    Response,
    Retry,
    TaskEnd,
    TaskServer,
    TaskStart,
    ToolResultEvent,
)
from agent.protocol.records import marked
from agent.record.fallback_stream import FallbackStream
from agent.safety.printable import printable, rich_text


def _tool_label(event: ToolResultEvent) -> str:
    marker = " (error)" if event.is_error else ""
    return f"{event.name}{marker}"


def _prefill_bar(processed: int, total: int) -> RenderableType:
    """llama-server's progress through the prompt: minutes for a whole repository, so it gets a bar."""
    bar = Table.grid(padding=(0, 1))
    bar.add_row(ProgressBar(total=total, completed=processed, width=30), f"{processed:,} / {total:,} prompt tokens")
    return bar


class RunView:
    def __init__(self, console: Console | None = None, errors: Console | None = None) -> None:
        self.console = console or Console()
        self.errors = errors or Console(stderr=True)
        # A reader that goes away (`| head -1`, a closed terminal) must not end the run: see FallbackStream.
        self._streams = [FallbackStream(self.console.file), FallbackStream(self.errors.file)]
        self.console.file, self.errors.file = self._streams
        # One panel per task in flight (tasks run in parallel with --parallel or a fleet), by task index.
        self.tasks: dict[int, dict[str, Any]] = {}
        self.in_flight: list[int] = []
        self._live: Live | None = None

    def __enter__(self) -> RunView:
        if self.live:
            self._live = Live(self._table(), console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)

    def divert_to(self, log_file: Path) -> None:
        """The run's log file, where output goes if stdout or stderr is closed."""
        for stream in self._streams:
            stream.divert_to(log_file)

    @property
    def live(self) -> bool:
        return self.console.is_terminal

    def log(self, message: str) -> None:
        # soft_wrap: a line stays one line in logs and cron mail, whatever the terminal width. Lines quote what the
        # repository and the model wrote (test output, reasons), so their control characters are shown, not sent.
        self.console.print(printable(message), markup=False, highlight=False, soft_wrap=True)

    def error(self, message: str) -> None:
        self.errors.print(printable(f"error: {message}"), markup=False, highlight=False, soft_wrap=True)

    def handle(self, event: Event) -> None:
        line = self._update(event)
        if self._live is not None:
            self._live.update(self._table())
        elif line:
            self.log(line)

    def _state(self, task: int | None) -> dict[str, Any]:
        """The panel of the event's task (a run-level event: of the latest task)."""
        index = task if task is not None else (self.in_flight[-1] if self.in_flight else 0)
        if index not in self.tasks:
            self.tasks[index] = _new_state(str(index) if index else "-")
        return self.tasks[index]

    def _update(self, event: Event) -> str | None:
        line = self._line(event)
        parallel = len(self.in_flight) > 1 and event.task is not None
        # With tasks in parallel each step says whose it is; lines that name their task already are left alone.
        if line is not None and parallel and not line.startswith(("task ", "environment")):
            return f"[task {event.task}] {line}"
        return line

    def _line(self, event: Event) -> str | None:
        state = self._state(event.task)
        match event:
            case TaskStart():
                state.update(task=f"{event.task}: {event.text[:60]}", turn=0, tool="-", status="running")
                if event.task is not None and event.task not in self.in_flight:
                    self.in_flight.append(event.task)
                return f"task {event.task} {'resumed' if event.resumed else 'started'} on branch {event.branch}"
            case Response(stats=stats):
                state["prefill"] = None
                state["turn"] = event.turn
                state["tok_s"] = stats.predicted_per_second
                state["cache"] = stats.cache_hit_ratio
                state["acceptance"] = stats.acceptance_rate
                drafts = f", {stats.draft_accepted}/{stats.draft_tokens} drafts accepted" if stats.draft_tokens else ""
                return (
                    f"turn {event.turn}: {stats.prompt_tokens} prompt tokens ({stats.cached_tokens} cached), "
                    f"{stats.completion_tokens} generated{drafts}, {stats.latency_s:.1f}s"
                )
            case ToolResultEvent():
                state["tool"] = _tool_label(event)
                return f"turn {event.turn}: {_tool_label(event)}"
            case TaskEnd(outcome=outcome):
                if outcome.index in self.in_flight:
                    self.in_flight.remove(outcome.index)
                state["prefill"] = None  # a task that failed mid-prefill leaves no stale bar
                verdict = outcome.shown_verdict
                words = outcome.status if verdict == outcome.status else f"{outcome.status}, {verdict}"
                state["status"] = f"{words}: {outcome.reason}"
                where = f" ({outcome.commit[:12]})" if outcome.commit else ""
                return f"task {outcome.index} {words}{where}: {outcome.reason}"
            case Retry():
                return f"model: {event.message}"
            case TaskServer():
                slot = f" slot {event.slot}" if event.slot is not None else ""
                return f"task {event.task} on {event.server}{slot}: {event.reason}"
            case EnvironmentProgress():
                state["status"] = f"environment: {event.message[:100]}"
                return f"environment: {event.message}"
            case EnvironmentReady(record=record):
                state["status"] = f"environment {record.status}"
                if record.status == "failed":
                    return f"environment FAILED (tasks run unverified): {record.error} (log: {record.log})"
                counted = f", {record.tests_collected} tests collected" if record.tests_collected is not None else ""
                return f"environment {record.status}: {record.image} ({record.source}){counted}"
            case PrefixCacheEvent():
                return f"prefix cache: {event.message}"
            case Baseline():
                return f"baseline: {event.result}" + (" (cached)" if event.cached else "")
            case GateEvent():
                return f"gate: {marked(event.verdict, event.test_infrastructure)}, {event.reason}"
            case Repair():
                return f"repair round {event.round}: {event.reason}"
            case PrefillProgress():  # the live panel's bar; a log gets the response line when it is done
                state["prefill"] = (event.processed, event.total)
        return None

    def _table(self) -> Table:
        """A block of rows per task in flight; between tasks, the last one's."""
        shown = self.in_flight or list(self.tasks)[-1:]
        table = Table(show_header=False, box=None, padding=(0, 1))
        for index in shown:
            _add_task_rows(table, self.tasks[index])
        return table


def _new_state(task: str) -> dict[str, Any]:
    return {
        "task": task,
        "turn": 0,
        "tok_s": None,
        "cache": None,
        "acceptance": None,
        "tool": "-",
        "status": "",
        "prefill": None,
    }


def _add_task_rows(table: Table, state: dict[str, Any]) -> None:
    tok_s = "-" if state["tok_s"] is None else f"{state['tok_s']:.1f}"
    cache = "-" if state["cache"] is None else f"{state['cache']:.0%}"
    acceptance = "-" if state["acceptance"] is None else f"{state['acceptance']:.0%}"
    for label, value in (
        ("task", state["task"]),
        ("turn", str(state["turn"])),
        ("decode tok/s", tok_s),
        ("cache hit", cache),
        ("draft acceptance", acceptance),
        ("last tool", state["tool"]),
        ("status", state["status"]),
    ):
        table.add_row(Text(label, style="bold"), rich_text(value))  # Text: a reason's "[/tmp]" is no markup
    if state["prefill"] is not None:
        table.add_row(Text("prefill", style="bold"), _prefill_bar(*state["prefill"]))
