"""The pack's worker processes under a run's stop handlers."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from agent.packing import workers
from agent.packing.workers import LazyPool
from agent.run.interrupt import stop_signals


def _square(_context: None, item: int) -> int:
    return item * item


@pytest.mark.timeout(60)  # the old code never returned from map() here: fail in a minute, not ten
def test_a_stop_signal_that_reaches_a_worker_as_it_starts_ends_it_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """`run --parallel 2` once printed `Process ForkPoolWorker-3 ... Interrupted: interrupted by SIGTERM`: the pool's
    terminate() reached a worker forked with the run's handlers before it had reset them."""
    first = tmp_path / "first"
    real_install = workers._install

    def signalled_as_it_starts(*args: Any) -> None:
        # The first worker gets its SIGTERM in the window between the fork and the reset of its handlers.
        try:
            os.close(os.open(first, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:
            os.kill(os.getpid(), signal.SIGTERM)
        real_install(*args)

    monkeypatch.setattr(workers, "_install", signalled_as_it_starts)
    monkeypatch.setattr(workers, "worker_count", lambda: 2)  # a pool of two on any machine, one core included
    with stop_signals():
        pool = LazyPool(_square, None)
        try:
            assert pool.map(list(range(40))) == [item * item for item in range(40)]
        finally:
            pool.close()
    assert first.exists()
    captured = capfd.readouterr()
    assert "Traceback" not in captured.err and "Interrupted" not in captured.err, captured.err


def _pid(_context: None, _item: int) -> int:
    return os.getpid()


def test_the_pool_starts_for_work_enough_to_share_then_takes_every_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "worker_count", lambda: 2)
    pool = LazyPool(_pid, None, min_work=10, work=lambda item: item)
    try:
        assert set(pool.map([4, 5])) == {os.getpid()}  # 9 of 10: done here
        assert set(pool.map([10])) == {os.getpid()}  # one item: nothing to share
        assert os.getpid() not in set(pool.map([5, 5]))  # 10: the pool starts
        assert os.getpid() not in set(pool.map([1, 1]))  # and, started, takes what is little
    finally:
        pool.close()
    counted = LazyPool(_pid, None, min_work=3)  # without `work`, the items are counted
    try:
        assert set(counted.map([0, 0])) == {os.getpid()}
        assert os.getpid() not in set(counted.map([0, 0, 0]))
    finally:
        counted.close()
