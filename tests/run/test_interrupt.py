"""Stop signals: the first raises Interrupted, later ones are ignored until the run has settled."""

from __future__ import annotations

import os
import signal

import pytest

from agent.run.interrupt import STOP_SIGNALS, Interrupted, stop_signals


@pytest.fixture(autouse=True)
def default_handlers():
    """Python's own handlers, whatever the test runner was started with (a background job ignores SIGINT)."""
    previous = {stop: signal.getsignal(stop) for stop in STOP_SIGNALS}
    for stop in STOP_SIGNALS:
        signal.signal(stop, signal.default_int_handler if stop == signal.SIGINT else signal.SIG_DFL)
    yield
    for stop, handler in previous.items():
        signal.signal(stop, handler)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_the_first_stop_signal_interrupts_and_later_ones_are_ignored(stop: signal.Signals) -> None:
    with stop_signals():
        with pytest.raises(Interrupted) as raised:
            os.kill(os.getpid(), stop)
        assert (raised.value.signal_name, raised.value.exit_code) == (stop.name, 128 + stop)
        os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C while settling: nothing happens
        os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_signal_the_process_was_started_ignoring_stays_ignored() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    with stop_signals():
        os.kill(os.getpid(), signal.SIGHUP)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
