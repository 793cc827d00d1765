"""`run --json`, `night --json`, `resume --json`: the run's typed events on stdout, one JSON object a line (as Codex
CLI's `exec --json` streams its events), for CI and scripts. stdout then holds exactly the transcript's lines (each
parses with agent.protocol.events.parse_event); the log lines, errors and the end block go to stderr."""

from __future__ import annotations

from rich.console import Console

from agent.protocol.events import Event
from agent.record.fallback_stream import FallbackStream
from agent.record.live import RunView


class JsonView(RunView):
    """The live view's interface with events as JSON lines instead of a story: never a panel, never a terminal."""

    def __init__(self, events: Console | None = None, errors: Console | None = None) -> None:
        errors = errors or Console(stderr=True)
        # The log lines go where errors go: stdout is the events' alone.
        super().__init__(console=errors, errors=errors)
        self._events = FallbackStream((events or Console()).file)
        self._streams.append(self._events)

    @property
    def live(self) -> bool:
        return False

    def handle(self, event: Event) -> None:
        self.proof.observe(event)
        self._events.write(event.model_dump_json() + "\n")
        self._events.flush()
