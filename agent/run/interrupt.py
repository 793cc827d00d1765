"""SIGINT, SIGTERM and SIGHUP stop a run the same way: the first one raises `Interrupted` in the main thread,
the run settles the task in flight (patch, interrupted commit, summary, cleanup) and exits 128 + the signal.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """A stop signal. A BaseException, so that no `except Exception` on the way up swallows it."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {self.signal_name}")

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _stop(signum: int, frame: FrameType | None) -> None:
    # Later signals (a second Ctrl-C, the SIGTERM a service manager sends after SIGHUP) are ignored from here on,
    # so the cleanup they would interrupt always finishes: a half-removed worktree is worse than a slow exit.
    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, signal.SIG_IGN)
    raise Interrupted(signum)


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Within: the first stop signal raises `Interrupted`; the previous handlers come back on the way out.

    A signal that the process was started ignoring stays ignored: `nohup` (SIGHUP) and a shell's background job
    (SIGINT) mean the run should outlive them."""
    previous = {
        stop_signal: signal.signal(stop_signal, _stop)
        for stop_signal in STOP_SIGNALS
        if signal.getsignal(stop_signal) is not signal.SIG_IGN
    }
    try:
        yield
    finally:
        for stop_signal, handler in previous.items():
            signal.signal(stop_signal, handler)
