"""Wall-clock limits of a task (--task-timeout) and of the night (--until / --deadline).

At the limit `TimeUp` is raised in the thread that entered `time_limit`, wherever the task is: in a model request,
a sandbox command, the gate. Like a stop signal it is a BaseException, so no `except Exception` on the way up
swallows it, and the runner settles the task as `timed_out` with its diff kept. Shortly before the limit the model
gets one message that time is up.

Tasks run in the main thread (one after the other; a Ray worker's task, as Ray runs it today) or in threads of
their own (a fleet of servers, parallel slots), and the limit reaches each the way it can:
- the main thread gets SIGALRM, whose handler raises TimeUp even out of a blocking system call (a request the
  server is holding is abandoned at once);
- any other thread gets TimeUp from a watchdog timer as an asynchronous exception
  (`PyThreadState_SetAsyncExc`). CPython raises it at the thread's next bytecode, at the same points where it
  runs signal handlers, but it cannot cut a blocking C call short: a thread blocked in a socket read gets it when
  the read returns. That is bounded: llama-server streams prefill progress and tokens (and a silent server trips
  --idle-timeout), a sandbox command is polled every fraction of a second and ends at its command timeout, and
  the waits of a task thread that could be long wake every WAKE_S (`wait_in_time`, the fleet's server pool).

Either way TimeUp comes out of the `with` (its body, or its exit when the limit falls just as the body ends) and
never after it: leaving cancels the alarm, and an asynchronous TimeUp that was sent but not yet raised is
withdrawn. Limits nest; the earlier one fires.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from types import FrameType, TracebackType
from typing import TypeVar

from agent.protocol.config import NightConfig, RunConfig
from agent.protocol.records import now_iso
from agent.settings.durations import format_duration

T = TypeVar("T")

# The model is told to finish this long before the limit (at most a quarter of the time it has).
GRACE_S = 300.0
# How often a long wait in a task's thread wakes up, so that a TimeUp sent to the thread is raised while it waits.
WAKE_S = 0.5
TIME_UP_MESSAGE = (
    "Time is up: the run's deadline is close. Finish now: leave the files in a consistent state and call finish "
    "with a summary of what you did and what is left undone. Anything unfinished at the deadline is committed as "
    "it stands."
)


class TimeUp(BaseException):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def wall_clock() -> float:
    """Now, in epoch seconds (time.time()): the one reading of the clock the limits here make, so that a test of
    the deadline can move the clock to it instead of waiting for it."""
    return time.time()


def grace_start(start: float, end: float) -> float:
    """When the time-is-up message is due, for a task that may run from `start` until `end` (wall_clock())."""
    return end - min(GRACE_S, (end - start) / 4)


def task_end(night: NightConfig, config: RunConfig) -> tuple[float, str] | None:
    """When a task starting now must end (wall_clock()), and why: the night's deadline or its own --task-timeout,
    the earlier."""
    ends = []
    if night.deadline_at is not None:
        ends.append((night.deadline_at.timestamp(), "deadline"))
    if config.task_timeout_s is not None:
        ends.append((wall_clock() + config.task_timeout_s, f"--task-timeout {format_duration(config.task_timeout_s)}"))
    return min(ends) if ends else None


def skip_reason(night: NightConfig) -> str | None:
    """Why a task must not start now (less than --min-task-time before the night's deadline), or None."""
    if night.deadline_at is None:
        return None
    left = night.deadline_at.timestamp() - wall_clock()
    if left < night.min_task_time_s:
        return (
            f"deadline: {format_duration(left)} left at {now_iso()}, less than --min-task-time "
            f"{format_duration(night.min_task_time_s)}"
        )
    return None


def time_notice(end: float | None) -> Callable[[], str | None]:
    """The loop's notice: once, the time-is-up message when the task is within its grace period."""
    if end is None:
        return lambda: None
    due = grace_start(wall_clock(), end)
    sent = False

    def notice() -> str | None:
        nonlocal sent
        if sent or wall_clock() < due:
            return None
        sent = True
        return TIME_UP_MESSAGE

    return notice


def time_limit(end: float, reason: str) -> contextlib.AbstractContextManager[None]:
    """Within: TimeUp(reason) at `end` (wall_clock()), or at once when it has passed; in any thread."""
    if threading.current_thread() is threading.main_thread():
        return _alarm(end, reason)
    return _Watchdog(end, reason)


def wait_in_time(future: Future[T]) -> T:
    """`future.result()` for a task's thread: the wait wakes every WAKE_S, so a TimeUp sent to the thread is raised
    within that time rather than when the future is done."""
    while not wait_futures([future], timeout=WAKE_S).done:
        pass
    return future.result()


@contextlib.contextmanager
def _alarm(end: float, reason: str) -> Iterator[None]:
    """The main thread's limit: SIGALRM. An enclosing limit that falls earlier is left to fire; a later one is
    re-armed on the way out."""
    outer_delay = signal.getitimer(signal.ITIMER_REAL)[0]
    outer_end = wall_clock() + outer_delay if outer_delay else None
    if outer_end is not None and outer_end <= end:
        yield
        return

    def _expire(signum: int, frame: FrameType | None) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        raise TimeUp(reason)

    previous = signal.signal(signal.SIGALRM, _expire)
    signal.setitimer(signal.ITIMER_REAL, max(0.001, end - wall_clock()))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_end is not None:
            signal.setitimer(signal.ITIMER_REAL, max(0.001, outer_end - wall_clock()))


# Guards the watchdogs' state and `_sent`: a watchdog's timer sends TimeUp only while the `with` has not been left.
_lock = threading.Lock()
# Per thread: the watchdog whose TimeUp was sent to it last (the one a pending asynchronous exception belongs to).
_sent: dict[int, _Watchdog] = {}


# Raises an exception (a class) in a thread at its next bytecode; NULL (None) withdraws one not raised yet. A PyDLL
# function: called with the GIL held, and a call of C code that runs no Python code on the way.
_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc


class _Watchdog:
    """A limit for a thread other than the main one: a timer thread raises TimeUp in it asynchronously."""

    def __init__(self, end: float, reason: str) -> None:
        self.thread_id = threading.get_ident()
        self.thread = ctypes.c_ulong(self.thread_id)  # made now: leaving must not call a function (__exit__)
        self.left = False

        # CPython raises an asynchronous exception by instantiating the class it was given with no arguments: the
        # reason goes in a class of this limit's own, which also tells its TimeUp from an enclosing limit's.
        class Expired(TimeUp):
            def __init__(self) -> None:
                super().__init__(reason)

        self.expired = Expired
        self.timer = threading.Timer(max(0.0, end - wall_clock()), self._expire)
        self.timer.daemon = True

    def __enter__(self) -> None:
        self.timer.start()

    def _expire(self) -> None:
        with _lock:
            if self.left:
                return
            _sent[self.thread_id] = self
            _set_async_exc(self.thread, ctypes.py_object(self.expired))

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        # CPython raises a sent exception on entering a Python function, after a call returns and at a jump back:
        # nothing in this block does any of that before the withdrawal (a C call, checked after it returns), so a
        # TimeUp the timer sent while this thread waited for the lock is withdrawn before it can be raised. After
        # the block no timer sends any.
        with _lock:
            self.left = True
            if self.thread_id in _sent and _sent[self.thread_id] is self:
                del _sent[self.thread_id]
                if error.__class__ is not self.expired:  # sent, not raised yet (an enclosing limit's is not ours)
                    _set_async_exc(self.thread, None)
        self.timer.cancel()
