"""What a person watching the run sees: the run's story as lines (environment, baseline, each tool call, the gate,
each repair round, each task's end with its verdict word), and on a terminal a small panel under them that says
what is happening now. A log or cron mail gets the same lines: the terminal never says less than the log.

Reasons, test output, build output, task texts, tool arguments and server messages are someone else's text: every
line and every cell goes through agent.safety.printable (escape sequences shown, never obeyed; rich markup never
parsed in them).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from agent.protocol.events import (
    Baseline,
    Compaction,
    EnvironmentProgress,
    EnvironmentReady,
    Event,
    GateEvent,
    GateStart,
    GenerationProgress,
    PrefillProgress,
    PrefixCacheEvent,
    Repair,
    Response,
    Retry,
    RunStart,
    TaskEnd,
    TaskServer,
    TaskStart,
    ToolCallEvent,
    ToolResultEvent,
)
from agent.protocol.records import TaskSummary, marked
from agent.record.fallback_stream import FallbackStream
from agent.record.reasons import reason_line, verdict_word
from agent.safety.printable import counted, printable

# A tool call's line shows the first of these arguments (what it works on), cut to ARGUMENT_CHARS.
SHOWN_ARGUMENTS = ("path", "command", "pattern", "name")
ARGUMENT_CHARS = 60
# A tool result's first line in a plain log, cut here (a terminal cuts it at its width).
RESULT_CHARS = 160


def _clock_time(seconds: float) -> str:
    """`0:18`, `5:41:42`."""
    minutes, second = divmod(int(max(seconds, 0)), 60)
    hours, minute = divmod(minutes, 60)
    return f"{hours}:{minute:02d}:{second:02d}" if hours else f"{minute}:{second:02d}"


def _tokens(number: int) -> str:
    """`704`, `8,192`, `164k`: a prompt's size at a glance."""
    return f"{number / 1000:.0f}k" if number >= 100_000 else f"{number:,}"


def _shown_argument(arguments: str) -> str:
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return ""
    if not isinstance(parsed, dict):
        return ""
    value = next((parsed[name] for name in SHOWN_ARGUMENTS if isinstance(parsed.get(name), str)), "")
    value = printable(value, one_line=True)
    return value if len(value) <= ARGUMENT_CHARS else value[: ARGUMENT_CHARS - 1] + "…"


def _first_line(text: str, limit: int) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    line = printable(line, one_line=True)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def task_end_line(outcome: TaskSummary) -> str:
    """`task 2 REGRESSED (1 test) on <branch> (<commit>): <why>`: how every view ends a task."""
    where = f" on {outcome.branch}" if outcome.branch and outcome.commit else ""
    where += f" ({outcome.commit[:12]})" if outcome.commit else ""
    return f"task {outcome.index} {verdict_word(outcome)}{where}: {reason_line(outcome)}"


@dataclass
class Proof:
    """What the run proved about the install, from its events: the first run's end block says it."""

    server_answered: bool = False
    sandbox_ran: bool = False
    baseline: Baseline | None = None

    def observe(self, event: Event) -> None:
        match event:
            case Response():
                self.server_answered = True
            case ToolResultEvent():
                self.sandbox_ran = True
            case Baseline():
                self.baseline = event
                self.sandbox_ran = self.sandbox_ran or event.ran

    def line(self) -> str:
        """`installation OK: server answered, sandbox ran, baseline 3 passed`, or which part it did not prove."""
        if not self.server_answered:
            return "installation NOT OK: the model server never answered (refactor-agent doctor says why)"
        if not self.sandbox_ran:
            return "installation NOT OK: the sandbox did not run (refactor-agent doctor says why)"
        if self.baseline is None or not self.baseline.ran:
            why = self.baseline.result if self.baseline is not None else "no baseline"
            return f"installation NOT OK: the baseline did not run ({printable(why, one_line=True)})"
        return (
            f"installation OK: server answered, sandbox ran, baseline {printable(self.baseline.result, one_line=True)}"
        )


@dataclass
class _TaskPanel:
    """One task in flight, as the panel shows it."""

    index: int
    text: str
    started: float
    now: str = "starting"
    turn: int = 0
    tok_s: float | None = None
    cache: float | None = None
    acceptance: float | None = None
    compactions: int = 0
    calls: dict[str, ToolCallEvent] = field(default_factory=dict)  # by id, until their result comes

    def tuning(self) -> str:
        parts = [f"decode {self.tok_s:.1f} tok/s" if self.tok_s is not None else "decode -"]
        if self.cache is not None:
            parts.append(f"cache hit {self.cache:.0%}")
        if self.acceptance is not None:
            parts.append(f"drafts {self.acceptance:.0%} accepted")
        if self.compactions:
            parts.append(f"compactions {self.compactions}")
        return " · ".join([*parts, f"turn {self.turn}"])


class RunView:
    def __init__(
        self, console: Console | None = None, errors: Console | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.console = console or Console()
        self.errors = errors or Console(stderr=True)
        # A reader that goes away (`| head -1`, a closed terminal) must not end the run: see FallbackStream.
        self._streams: list[FallbackStream] = []
        for console in dict.fromkeys([self.console, self.errors]):  # one stream each, also when they are one
            console.file = FallbackStream(console.file)
            self._streams.append(console.file)
        self._clock = clock
        # One panel per task in flight (tasks run in parallel with --parallel or a fleet), by task index; 0 is the
        # run's own (the environment before the first task).
        self.tasks: dict[int, _TaskPanel] = {}
        self.in_flight: list[int] = []
        self.total_tasks: int | None = None
        self.deadline_at: float | None = None
        self.proof = Proof()
        self._live: Live | None = None

    def __enter__(self) -> RunView:
        if self.live:
            # transient: the panel goes when the run ends; the lines above it stay, then the end block.
            self._live = Live(console=self.console, get_renderable=self._panel, refresh_per_second=4, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

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
        # While the panel is up, rich prints this above it.
        self.console.print(printable(message), markup=False, highlight=False, soft_wrap=True)

    def error(self, message: str) -> None:
        self.errors.print(printable(f"error: {message}"), markup=False, highlight=False, soft_wrap=True)

    def handle(self, event: Event) -> None:
        self.proof.observe(event)
        line = self._update(event)
        if line:
            self.log(line)
        if self._live is not None:
            self._live.refresh()

    def _state(self, task: int | None) -> _TaskPanel:
        """The panel of the event's task (a run-level event: of the latest task, else the run's own)."""
        index = task if task is not None else (self.in_flight[-1] if self.in_flight else 0)
        if index not in self.tasks:
            self.tasks[index] = _TaskPanel(index=index, text="", started=self._clock())
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
            case RunStart():
                self.total_tasks, self.deadline_at = event.tasks, event.deadline_at
            case TaskStart():
                state.text, state.started, state.now = printable(event.text, one_line=True), self._clock(), "starting"
                if event.task is not None and event.task not in self.in_flight:
                    self.in_flight.append(event.task)
                return f"task {event.task} {'resumed' if event.resumed else 'started'} on branch {event.branch}"
            case Response(stats=stats):
                state.turn, state.now = event.turn, f"turn {event.turn} answered"
                state.tok_s, state.cache, state.acceptance = (
                    stats.predicted_per_second,
                    stats.cache_hit_ratio,
                    stats.acceptance_rate,
                )
                drafts = f", {stats.draft_accepted}/{stats.draft_tokens} drafts accepted" if stats.draft_tokens else ""
                return (
                    f"turn {event.turn}: {stats.prompt_tokens} prompt tokens ({stats.cached_tokens} cached), "
                    f"{stats.completion_tokens} generated{drafts}, {stats.latency_s:.1f}s"
                )
            case ToolCallEvent():
                state.calls[event.id] = event
                state.now = f"tool: {event.name} {_shown_argument(event.arguments)}".rstrip()
            case ToolResultEvent():
                call = state.calls.pop(event.id, None)
                shown = _shown_argument(call.arguments) if call is not None else ""
                # A tool's error text says "error: ..." itself: the line says it once.
                error = _first_line(event.text, RESULT_CHARS).removeprefix("error: ")
                outcome = f"error: {error}" if event.is_error else "ok"
                return f"turn {event.turn}  {' '.join(filter(None, [event.name, shown]))} → {outcome}"
            case GenerationProgress():
                state.now = f"generating {event.tokens:,} tokens ({event.elapsed_s:.0f} s)"
            case PrefillProgress():
                state.now = f"prefill {event.processed * 100 // max(event.total, 1)}% of {_tokens(event.total)} tokens"
            case GateStart():
                state.now = _gate_start(event)
            case TaskEnd(outcome=outcome):
                if outcome.index in self.in_flight:
                    self.in_flight.remove(outcome.index)
                state.now = f"{verdict_word(outcome)}"
                return task_end_line(outcome)
            case Compaction():
                state.compactions += 1
                return f"conversation compacted, {event.record().describe()} (window {event.n_ctx:,})"
            case Retry():
                state.now = f"model: {printable(event.message, one_line=True)}"
                return f"model: {event.message}"
            case TaskServer():
                slot = f" slot {event.slot}" if event.slot is not None else ""
                return f"task {event.task} on {event.server}{slot}: {event.reason}"
            case EnvironmentProgress():
                state.now = f"environment: {printable(event.message, one_line=True)[:100]}"
                return f"environment: {event.message}"
            case EnvironmentReady(record=record):
                state.now = f"environment {record.status}"
                if record.status == "failed":
                    return f"environment FAILED (tasks run unverified): {record.error} (log: {record.log})"
                tests = f", {counted(record.tests_collected, 'test')} collected" if record.tests_collected else ""
                return f"environment {record.status}: {record.image} ({record.source}){tests}"
            case PrefixCacheEvent():
                return f"prefix cache: {event.message}"
            case Baseline():
                return f"baseline: {event.result}" + (" (cached)" if event.cached else "")
            case GateEvent():
                return f"gate: {marked(event.verdict, event.test_infrastructure)}, {event.reason}"
            case Repair():
                state.now = f"repair round {event.round}"
                return f"repair round {event.round}: {event.reason}"
        return None

    def _panel(self) -> Group:
        """Two lines per task in flight (between tasks, the last one's), then the tuning numbers once."""
        # Copies first: rich redraws from its own thread while tasks in parallel threads add to these.
        tasks, in_flight = dict(self.tasks), list(self.in_flight)
        shown = [tasks[index] for index in in_flight if index in tasks] or list(tasks.values())[-1:]
        lines: list[Text] = []
        for state in shown:
            lines += [self._headline(state), Text(f"now: {state.now}", no_wrap=True, overflow="ellipsis")]
        if shown and shown[-1].index:
            lines.append(Text(shown[-1].tuning(), style="dim", no_wrap=True, overflow="ellipsis"))
        return Group(*lines)

    def _headline(self, state: _TaskPanel) -> Text:
        now = self._clock()
        of = f"/{self.total_tasks}" if self.total_tasks else ""
        parts = [f"task {state.index}{of}" if state.index else "run", f"{_clock_time(now - state.started)} elapsed"]
        if self.deadline_at is not None:
            until = time.strftime("%H:%M", time.localtime(self.deadline_at))
            parts.append(f"{_clock_time(self.deadline_at - now)} left (until {until})")
        headline = Text("  ".join(parts), style="bold", no_wrap=True, overflow="ellipsis")
        if state.text:
            headline.append(f"  {state.text}", style="")  # Text, never markup: a task's "[/x]" is just text
        return headline


def _gate_start(event: GateStart) -> str:
    tests = counted(event.tests, "test") if event.tests is not None else "the tests"
    match event.kind:
        case "baseline":
            return f"baseline: running {tests}"
        case "rerun":
            regressed = counted(event.tests, "regressed test") if event.tests is not None else "the regressed tests"
            return f"gate: re-running {regressed} alone"
    return f"gate: running {tests}"
