"""Wall-clock limits of a task (--task-timeout) and of the night (--until / --deadline).

At the limit `TimeUp` is raised in the main thread by SIGALRM, wherever the run is: in a model request (the
HTTP read is abandoned, whatever the server does), a sandbox command, the gate. Like a stop signal it is a
BaseException, so no `except Exception` on the way up swallows it, and the runner settles the task as
`timed_out` with its diff kept. Shortly before the limit the model gets one message that time is up.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from types import FrameType

# The model is told to finish this long before the limit (at most a quarter of the time it has).
GRACE_S = 300.0
TIME_UP_MESSAGE = (
    "Time is up: the run's deadline is close. Finish now: leave the files in a consistent state and call finish "
    "with a summary of what you did and what is left undone. Anything unfinished at the deadline is committed as "
    "it stands."
)


class TimeUp(BaseException):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def grace_start(start: float, end: float) -> float:
    """When the time-is-up message is due, for a task that may run from `start` until `end` (time.time())."""
    return end - min(GRACE_S, (end - start) / 4)


@contextlib.contextmanager
def time_limit(end: float, reason: str) -> Iterator[None]:
    """Within: TimeUp(reason) at `end` (time.time()), or at once when it has passed. Main thread only."""

    def _expire(signum: int, frame: FrameType | None) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        raise TimeUp(reason)

    previous = signal.signal(signal.SIGALRM, _expire)
    signal.setitimer(signal.ITIMER_REAL, max(0.001, end - time.time()))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
