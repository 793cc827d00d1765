"""Doubles for the time limits' clocks (agent/run/time_limit.py), so that a test of a limit waits for what its tasks
do, never for a limit long enough for a loaded machine to get it done: HeldLimits lets a limit that has fallen stop
its task only once the test says the task is where it should be stopped (`release_when`, with `on_stack` to tell
where a thread is), and MovedClock moves the limits' wall clock to the night's deadline instead of waiting for it."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from types import FunctionType

import pytest

import agent.run.time_limit


class HeldLimits:
    """Within: a time limit that falls holds its TimeUp until `in_flight` is set (120 s at most). A limit's watchdog
    (any thread but the main one) sends TimeUp under the limits' lock, which this holds meanwhile."""

    def __init__(self) -> None:
        self.in_flight = threading.Event()
        self.released_at = 0.0  # time.monotonic() when the limits were let go
        self._held = threading.Event()
        self._holder = threading.Thread(target=self._hold, daemon=True)

    def _hold(self) -> None:
        with agent.run.time_limit._lock:
            self._held.set()
            self.in_flight.wait(120)
            self.released_at = time.monotonic()

    def __enter__(self) -> HeldLimits:
        self._holder.start()
        self._held.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        self.in_flight.set()
        self._holder.join()

    def release_when(self, ready: Callable[[], bool]) -> None:
        """Sets `in_flight` once `ready()` (polled from a thread of its own; 120 s at most)."""

        def release() -> None:
            ends = time.monotonic() + 120
            while not ready() and time.monotonic() < ends:
                time.sleep(0.005)
            self.in_flight.set()

        threading.Thread(target=release, daemon=True).start()


def on_stack(thread_id: int | None, function: FunctionType) -> bool:
    """Whether the thread is running `function` now, anywhere on its stack: where a thread waits, without a hook in
    the code it waits in (a thread blocked on a lock shows the frame that asked for it)."""
    frame = sys._current_frames().get(thread_id) if thread_id is not None else None
    while frame is not None:
        if frame.f_code is function.__code__:
            return True
        frame = frame.f_back
    return False


class MovedClock:
    """The time limits' wall clock (agent.run.time_limit.wall_clock), which the test moves forward."""

    def __init__(self) -> None:
        self.ahead_s = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead_s

    def move_to(self, when: datetime) -> None:
        self.ahead_s = when.timestamp() - time.time()


def moved_clock(monkeypatch: pytest.MonkeyPatch) -> MovedClock:
    """A MovedClock the limits read the time from for the rest of the test (the real time until it is moved)."""
    clock = MovedClock()
    monkeypatch.setattr(agent.run.time_limit, "wall_clock", clock)
    return clock
