"""Several llama-servers for one run: which server a task's requests go to, and what happens when one dies.

A task is bound to one server from its first request to its end (each server has one slot, --parallel 1, that
keeps the task's prefix resident through its turns and repair rounds). Among the servers with a free slot, a
task goes to the one that last served the same prefix (system text + tools: tasks on one commit share it), else
to the least loaded; with no free slot it waits for one. A server that keeps failing past the retry policy
(connection errors, 5xx, idle timeouts: `RetriesExhausted`) is taken out of rotation for the rest of the run, and
the task's conversation continues on another server: the history is resent whole, so the new server prefills it
once and the task goes on from the turn it was at (no work in the worktree is lost or redone).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.config import LLMConfig
from agent.events import Event, Retry, TaskServer
from agent.interrupt import Interrupted
from agent.llm import AssistantTurn, ModelUnavailable, OpenAIChatModel, RetriesExhausted
from agent.time_limit import WAKE_S

TASKS_PER_SERVER = 1  # one slot each: a second task would evict the first one's prefix


class NoServerLeft(ModelUnavailable):
    """Every server of the fleet was taken out of rotation; str() names each with its last failure."""


def prefix_digest(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """What a server keeps in its KV cache between tasks: the system message (instructions + repository) and tools."""
    head = json.dumps([messages[:1], tools], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(head.encode("utf-8")).hexdigest()


@dataclass
class _Server:
    url: str
    in_flight: int = 0
    prefix: str | None = None  # digest of the prefix it served last
    down: str | None = None  # why it was taken out of rotation


class ServerPool:
    """The fleet's bookkeeping; thread-safe (tasks run in parallel, one thread each)."""

    def __init__(self, urls: list[str], *, tasks_per_server: int = TASKS_PER_SERVER) -> None:
        if not urls:
            raise ValueError("a fleet needs at least one server")
        self._servers = [_Server(url) for url in urls]
        self._tasks_per_server = tasks_per_server
        self._changed = threading.Condition()
        self._stop_signal: int | None = None

    @property
    def size(self) -> int:
        return len(self._servers)

    def live(self) -> list[str]:
        with self._changed:
            return [server.url for server in self._servers if server.down is None]

    def taken_out(self) -> dict[str, str]:
        with self._changed:
            return {server.url: server.down for server in self._servers if server.down is not None}

    def acquire(self, digest: str | None) -> tuple[str, str]:
        """A server for a task (blocks until one has a free slot) and why it was chosen."""
        with self._changed:
            while True:
                self.check_stop()
                live = [server for server in self._servers if server.down is None]
                if not live:
                    failures = "; ".join(f"{server.url}: {server.down}" for server in self._servers)
                    raise NoServerLeft(f"every server of the fleet stopped answering ({failures})")
                free = [server for server in live if server.in_flight < self._tasks_per_server]
                if free:
                    holder = next((server for server in free if digest and server.prefix == digest), None)
                    chosen = holder or min(free, key=lambda server: server.in_flight)  # ties: the order given
                    chosen.in_flight += 1
                    chosen.prefix = digest
                    return chosen.url, "holds the task's prefix" if holder else "least loaded"
                self._changed.wait(WAKE_S)  # waking up now and then lets a task's TimeUp reach it here

    def stop(self, signum: int) -> None:
        """The run got a stop signal (in the main thread): every task raises Interrupted at its next request."""
        with self._changed:
            self._stop_signal = signum
            self._changed.notify_all()

    def check_stop(self) -> None:
        if self._stop_signal is not None:
            raise Interrupted(self._stop_signal)

    def release(self, url: str) -> None:
        with self._changed:
            self._server(url).in_flight -= 1
            self._changed.notify_all()

    def take_out(self, url: str, reason: str) -> None:
        with self._changed:
            self._server(url).down = reason
            self._changed.notify_all()

    def _server(self, url: str) -> _Server:
        return next(server for server in self._servers if server.url == url)


class FleetModel:
    """One task's ChatModel on a fleet: bound to a server at its first request, moved when that server dies.

    `emit` receives the task's TaskServer, Retry and PrefillProgress events; `release` ends the binding (call it
    when the task ends, whatever happened)."""

    def __init__(
        self,
        pool: ServerPool,
        config: LLMConfig,
        *,
        emit: Callable[[Event], None],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.name = config.model
        self._pool = pool
        self._config = config
        self._emit = emit
        self._sleep = sleep
        self._url: str | None = None
        self._model: OpenAIChatModel | None = None

    @property
    def server(self) -> str | None:
        return self._url

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        moved_from: str | None = None
        while True:
            self._pool.check_stop()
            if self._model is None:
                self._bind(prefix_digest(messages, tools), moved_from)
            assert self._model is not None and self._url is not None
            try:
                return self._model.complete(messages, tools)
            except RetriesExhausted as error:
                moved_from = f"{self._url} stopped answering ({error})"
                self._pool.take_out(self._url, str(error))
                self.release()

    def release(self) -> None:
        if self._url is not None:
            self._pool.release(self._url)
        self._url, self._model = None, None

    def _bind(self, digest: str, moved_from: str | None) -> None:
        url, why = self._pool.acquire(digest)
        self._url = url
        self._model = OpenAIChatModel(
            self._config.model_copy(update={"server_url": url}),
            on_retry=lambda message: self._emit(Retry(message=message)),
            on_progress=self._emit,
            sleep=self._sleep,
        )
        self._emit(TaskServer(server=url, reason=f"failover: {moved_from}; {why}" if moved_from else why))
