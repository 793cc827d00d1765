"""States of the tests' own made as the session's collection ends, on the second core, while the serial session runs
the tests before theirs: a test marks the state it starts from (`@pytest.mark.started_at_collection(state)`, a
callable of no arguments whose result is picklable: a night made on a fixture repository, State below) and gets
what state() returned when it asks for it (made(state)). The marked states are made one after the other, in the
order of the tests that use them, in one child process forked from the session's as collection ends, at a lower
priority (support/early.py's policy: the session's own processes keep their core). Deselected, nothing is made;
nothing for --collect-only; a state no test marked (or asked for without the collection hook) is made when asked,
in this process, and a state that failed in the background fails the test that asks for it, with its traceback.

A state is made at a place of its own and reads nothing the session writes: the child has its own $XDG_STATE_HOME
and $XDG_CACHE_HOME (what the session remembers and caches) and its own temporary directory (its runs' worktrees
and scratch folders, which the session's runs would otherwise see as another run's). The processes a test only
waits for have support/early.py's fixtures."""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import shutil
import signal
import tempfile
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic

import pytest

from support.local_sandbox import zygote_socket
from support.repos import Made, made_at_a_root, once_made, session_root

NICE = 10  # support/early.py's BACKGROUND


def start_at_collection(items: Iterable[pytest.Item]) -> None:
    """The session's collection hook (tests/conftest.py): the child that makes the states the selected tests mark."""
    states: list[Callable[[], Any]] = []
    for item in items:
        for marker in item.iter_markers("started_at_collection"):
            if marker.args[0] not in states:
                states.append(marker.args[0])
    if states:
        _Child.fork(states)


@dataclass(frozen=True, eq=False)
class State(Generic[Made]):
    """What `make` returns and leaves at a root of its own (an empty folder), made once per session and put back for
    each later test (support/repos.py: made_once; `repo`, of what `make` returned, the repository under the root);
    made in the background when a test marks it (@pytest.mark.started_at_collection(state))."""

    make: Callable[[Path], Made]
    repo: Callable[[Made], Path]

    def __call__(self) -> tuple[Made, Path, Path]:
        return made_at_a_root(self.make)

    def made(self) -> Made:
        return once_made(self, lambda: made(self), self.repo)


def made(state: Callable[[], Any]) -> Any:
    """What `state()` returns: made in the background if a test marked it, else now, in this process."""
    child = _Child.running
    if child is None or state not in child.states:
        return state()
    return child.result(child.states.index(state))


class _Child:
    """The process that makes the marked states, forked as collection ends; after each, it writes the state's
    result to a file of its number and the number to a pipe."""

    running: _Child | None = None

    def __init__(self, states: list[Callable[[], Any]], pid: int, folder: Path, done: int) -> None:
        self.states = states
        self.pid = pid
        self.folder = folder
        self.done = os.fdopen(done, "r")
        self.finished: set[int] = set()

    @classmethod
    def fork(cls, states: list[Callable[[], Any]]) -> None:
        folder = Path(tempfile.mkdtemp(prefix="background-states-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        zygote_socket()  # the session's pytest zygote, for the gate's runs of the child's sandboxes too: started now
        session_root()  # where the child makes its states and templates: the session's, removed at its end
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            cls._make(states, folder, write)
        os.close(write)
        cls.running = cls(states, pid, folder, read)
        atexit.register(cls.running.stop)

    @staticmethod
    def _make(states: list[Callable[[], Any]], folder: Path, done: int) -> None:
        try:
            os.nice(NICE)
            log = os.open(folder / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.dup2(log, 1)
            os.dup2(log, 2)
            for name in ("XDG_STATE_HOME", "XDG_CACHE_HOME"):
                os.environ[name] = str(folder / name.lower())
            scratch = folder / "tmp"
            scratch.mkdir()
            tempfile.tempdir = str(scratch)
            for number, state in enumerate(states):
                try:
                    result = pickle.dumps(("made", state()))
                except BaseException:  # its failure, or a result that does not pickle: the test that asks says it
                    result = pickle.dumps(("failed", traceback.format_exc()))
                (folder / f"{number}.tmp").write_bytes(result)
                os.rename(folder / f"{number}.tmp", folder / str(number))
                os.write(done, f"{number}\n".encode())
        finally:
            os._exit(0)  # nothing of the session's (its exit handlers, its plugins' ends) runs here

    def result(self, number: int) -> Any:
        while number not in self.finished:
            line = self.done.readline()
            if not line:
                log = (self.folder / "log").read_text(errors="replace")[-4000:]
                raise AssertionError(f"the background's process ended before making state {number}:\n{log}")
            self.finished.add(int(line))
        with open(self.folder / str(number), "rb") as file:
            kind, value = pickle.load(file)
        if kind == "failed":
            raise AssertionError(f"made in the background (support/background.py), it failed:\n{value}")
        return value

    def stop(self) -> None:
        """At the session's end: a child still making states (a test stopped the session early) is killed."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        self.done.close()
