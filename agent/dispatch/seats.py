"""Several llama-servers, or several slots of one (`--parallel N`), for one run: which slot of which server a
task's requests go to, and what happens when a server dies.

A task is bound to one seat, a slot of a server, from its first request to its end: its requests are pinned to
that slot (`id_slot`), whose KV cache keeps the task's prefix resident through its turns and repair rounds. A
server with N slots seats N tasks at once. Among the free seats a task goes to the one that last served the same
prefix (system text + tools: tasks on one commit share it), else to a seat of the least loaded server; with no
free seat it waits for one. A server that keeps failing past the retry policy (connection errors, 5xx, idle
timeouts: `RetriesExhausted`) is taken out of rotation with all its seats for the rest of the run, and the task's
conversation continues on another server: the history is resent whole, so the new server prefills it once and the
task goes on from the turn it was at (no work in the worktree is lost or redone).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.protocol.config import LLMConfig
from agent.protocol.events import Event, Retry, TaskServer
from agent.protocol.model import AssistantTurn, RetriesExhausted, ServerLost
from agent.run.interrupt import Interrupted
from agent.run.time_limit import WAKE_S
from agent.server.chat import OpenAIChatModel
from agent.server.kv_cache import PrefixCache, prefix_cached


class NoServerLeft(ServerLost):
    """Every server of the fleet was taken out of rotation; str() names each with its last failure."""


def prefix_digest(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """What a server keeps in its KV cache between tasks: the system message (instructions + repository) and tools."""
    head = json.dumps([messages[:1], tools], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(head.encode("utf-8")).hexdigest()


@dataclass
class Seat:
    """One slot of one server; one task at a time holds it."""

    url: str
    slot: int
    taken: bool = False
    prefix: str | None = None  # digest of the prefix it served last


class ServerPool:
    """The fleet's bookkeeping; thread-safe (tasks run in parallel, one thread each)."""

    def __init__(self, urls: list[str], *, slots_per_server: int = 1) -> None:
        if not urls:
            raise ValueError("a fleet needs at least one server")
        self.slots_per_server = slots_per_server
        self._urls = list(urls)
        self._seats = [Seat(url, slot) for url in urls for slot in range(slots_per_server)]
        self._down: dict[str, str] = {}  # url -> why it was taken out of rotation
        self._changed = threading.Condition()
        self._stop_signal: int | None = None

    @property
    def size(self) -> int:
        """How many tasks can run at once."""
        return len(self._seats)

    def seats(self) -> list[Seat]:
        return list(self._seats)

    def live(self) -> list[str]:
        with self._changed:
            return [url for url in self._urls if url not in self._down]

    def taken_out(self) -> dict[str, str]:
        with self._changed:
            return dict(self._down)

    def acquire(self, digest: str | None, saved_on: frozenset[str] = frozenset()) -> tuple[Seat, str]:
        """A seat for a task (blocks until one is free) and why it was chosen: the slot that holds the task's
        prefix, else a slot of the least loaded server that has it saved (`saved_on`: their URLs), else of the
        least loaded server."""
        with self._changed:
            while True:
                self.check_stop()
                live = [seat for seat in self._seats if seat.url not in self._down]
                if not live:
                    failures = "; ".join(f"{url}: {why}" for url, why in self._down.items())
                    raise NoServerLeft(f"every server of the fleet stopped answering ({failures})")
                free = [seat for seat in live if not seat.taken]
                if free:
                    holder = next((seat for seat in free if digest and seat.prefix == digest), None)
                    load = {url: sum(seat.taken for seat in live if seat.url == url) for url in self._urls}
                    savers = [seat for seat in free if seat.url in saved_on]
                    saver = min(savers, key=lambda seat: load[seat.url]) if savers else None
                    chosen = holder or saver or min(free, key=lambda seat: load[seat.url])  # ties: the order given
                    chosen.taken = True
                    chosen.prefix = digest
                    why = "holds the task's prefix" if holder else "has the prefix saved" if saver else "least loaded"
                    return chosen, why
                self._changed.wait(WAKE_S)  # waking up now and then lets a task's TimeUp reach it here

    def stop(self, signum: int) -> None:
        """The run got a stop signal (in the main thread): every task raises Interrupted at its next request."""
        with self._changed:
            self._stop_signal = signum
            self._changed.notify_all()

    def check_stop(self) -> None:
        if self._stop_signal is not None:
            raise Interrupted(self._stop_signal)

    def release(self, seat: Seat) -> None:
        with self._changed:
            seat.taken = False
            self._changed.notify_all()

    def take_out(self, url: str, reason: str) -> None:
        with self._changed:
            self._down[url] = reason
            self._changed.notify_all()


class FleetModel:
    """One task's ChatModel on a fleet: bound to a seat at its first request, moved when that server dies.

    `emit` receives the task's TaskServer, Retry, PrefillProgress and PrefixCacheEvent events; `caches` are the
    seats' saved-prefix caches (servers the launcher started with --slot-save-path); `release` ends the binding
    (call it when the task ends, whatever happened)."""

    def __init__(
        self,
        pool: ServerPool,
        config: LLMConfig,
        *,
        emit: Callable[[Event], None],
        caches: dict[tuple[str, int], PrefixCache] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.name = config.model
        self._pool = pool
        self._config = config
        self._emit = emit
        self._caches = caches or {}
        self._sleep = sleep
        self._seat: Seat | None = None
        self._model: Any = None  # the seat's ChatModel: an OpenAIChatModel, behind the seat's prefix cache if any

    @property
    def server(self) -> str | None:
        return self._seat.url if self._seat is not None else None

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        moved_from: str | None = None
        while True:
            self._pool.check_stop()
            if self._seat is None:
                self._bind(prefix_digest(messages, tools), moved_from, self._saved_on(messages, tools))
            assert self._seat is not None
            try:
                return self._model.complete(messages, tools)
            except RetriesExhausted as error:
                moved_from = f"{self._seat.url} stopped answering ({error})"
                self._pool.take_out(self._seat.url, str(error))
                self.release()

    def release(self) -> None:
        if self._seat is not None:
            self._pool.release(self._seat)
        self._seat, self._model = None, None

    def _saved_on(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> frozenset[str]:
        """The servers whose save directory holds the task's prefix (restored in milliseconds there)."""
        if not messages or messages[0].get("role") != "system":
            return frozenset()
        system = str(messages[0]["content"])
        one_per_server = {url: cache for (url, _slot), cache in self._caches.items()}  # a server's slots share it
        return frozenset(url for url, cache in one_per_server.items() if cache.has_saved(system, tools))

    def _bind(self, digest: str, moved_from: str | None, saved_on: frozenset[str]) -> None:
        seat, why = self._pool.acquire(digest, saved_on)
        self._seat = seat
        model = OpenAIChatModel(
            self._config.model_copy(update={"server_url": seat.url}),
            on_retry=lambda message: self._emit(Retry(message=message)),
            on_progress=self._emit,
            sleep=self._sleep,
            slot=seat.slot,
        )
        cache = self._caches.get((seat.url, seat.slot))
        if cache is not None:
            cache.notify = self._emit  # the seat is this task's until release(): its cache reports to it
        self._model = prefix_cached(model, cache)
        slot = seat.slot if self._pool.slots_per_server > 1 else None
        reason = f"failover: {moved_from}; {why}" if moved_from else why
        self._emit(TaskServer(server=seat.url, slot=slot, reason=reason))
