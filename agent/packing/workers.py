"""Per-file work of a cold pack (reading, classifying, symbols, outlines) spread over the machine's cores.

Tree-sitter and the regular expressions hold the GIL, so threads would take turns: this uses processes. They are
forked (Linux), so they inherit the imported modules and the pool's context (the repository's file list, the
flags) and start in milliseconds; only an index goes to a worker and a tuple of plain values comes back, because
pickling objects each way cost as much CPU as the work itself. Elsewhere the work stays in this process. The
pool starts only when a batch has work enough to share (the caller's measure, `min_work`): a warm run, which parses
and reads nothing, never starts one, nor does the cold pack of a small repository, whose work in this process
takes less than forking the workers (and their copies of its pages) would. Results come back in the order of the
items, so they do not depend on the workers.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
from collections.abc import Callable, Sequence
from multiprocessing.pool import Pool
from typing import Any, Generic, TypeVar

from agent.run.interrupt import STOP_SIGNALS

Context = TypeVar("Context")
Item = TypeVar("Item")
Result = TypeVar("Result")

MAX_WORKERS = 4  # beyond this, reading and pickling in the parent becomes the bottleneck
CHUNKS_PER_WORKER = 16  # a task per item costs a round trip each; few large chunks leave a worker idle at the end

# In a worker process: the function and context of its pool, set once when the worker starts.
_worker_function: Callable[[Any, Any], Any] | None = None
_worker_context: Any = None


def worker_count() -> int:
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS))


def _install(function: Callable[[Any, Any], Any], context: Any) -> None:
    global _worker_function, _worker_context
    _worker_function, _worker_context = function, context
    # A forked worker inherits the run's stop handlers (agent.run.interrupt), which would raise Interrupted in it, with
    # a traceback, when the pool is terminated: a worker just ends, and the parent settles the run. It was forked
    # with the stop signals blocked (LazyPool.start), so one sent before this point waits here and then ends it.
    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _call(item: Any) -> Any:
    assert _worker_function is not None, "a worker runs only in a pool that installed its function"
    return _worker_function(_worker_context, item)


class LazyPool(Generic[Context, Item, Result]):
    """function(context, item) over items, on a process pool created on the first map() of at least `min_work`
    (two items or more), each item weighing `work(item)` (1 unless given); close() ends it. Once the pool is there,
    every batch of two items or more goes to it. function must be a module-level function; context reaches the
    workers through the fork, never pickled, so it may be large. Items and results are pickled: keep them small
    and plain."""

    def __init__(
        self,
        function: Callable[[Context, Item], Result],
        context: Context,
        *,
        min_work: int = 2,
        work: Callable[[Item], int] | None = None,
    ) -> None:
        self._function = function
        self._context = context
        self._workers = worker_count()
        self._pool: Pool | None = None
        self._min_work = min_work
        self._work = work

    def map(self, items: Sequence[Item]) -> list[Result]:
        return self.start(items)()

    def start(self, items: Sequence[Item]) -> Callable[[], list[Result]]:
        """Starts the work on the pool's workers and returns at once; the function returned waits for the results.
        Batches started one after another are worked on in that order."""
        if self._workers < 2 or len(items) < 2 or (self._pool is None and not self._worth_a_pool(items)):
            return lambda: [self._function(self._context, item) for item in items]
        if self._pool is None:
            # Objects the children never free need no tracing by their collector, which would otherwise touch
            # (and so copy) every page of the parent's heap.
            gc.freeze()
            # The workers, and the pool's threads that fork replacements later, inherit this mask: a stop signal
            # (close() terminates the pool) cannot reach a worker before _install has reset its handlers.
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            try:
                self._pool = multiprocessing.get_context("fork").Pool(
                    self._workers, initializer=_install, initargs=(self._function, self._context)
                )
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            gc.unfreeze()
        chunksize = max(1, len(items) // (self._workers * CHUNKS_PER_WORKER))
        return self._pool.map_async(_call, items, chunksize).get

    def _worth_a_pool(self, items: Sequence[Item]) -> bool:
        if self._work is None:
            return len(items) >= self._min_work
        return sum(self._work(item) for item in items) >= self._min_work

    def close(self) -> None:
        # terminate, not close: after an interrupted map() a worker may be gone with its task, and close() would
        # then wait for that task forever; after a finished map() the workers hold nothing worth waiting for.
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
