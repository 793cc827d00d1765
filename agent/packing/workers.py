"""Per-file work of a cold pack (reading, classifying, symbols, outlines) spread over the machine's cores.

Tree-sitter and the regular expressions hold the GIL, so threads would take turns: this uses processes. They are
forked (Linux), so they inherit the imported modules and start in milliseconds; elsewhere the work stays in this
process. The pool starts only when a batch has work to share, so a warm run, which parses and reads nothing,
never starts one. Results come back in the order of the items, so they do not depend on the workers.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from multiprocessing.pool import Pool
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

MAX_WORKERS = 4  # beyond this, reading and pickling in the parent becomes the bottleneck
CHUNKS_PER_WORKER = 4


def worker_count() -> int:
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS))


class LazyPool:
    """A process pool created on the first map() with more than one item; close() ends it."""

    def __init__(self) -> None:
        self._workers = worker_count()
        self._pool: Pool | None = None

    def map(self, function: Callable[[Item], Result], items: Sequence[Item]) -> list[Result]:
        """function must be a module-level function (pickled by name); it runs in the children."""
        if self._workers < 2 or len(items) < 2:
            return [function(item) for item in items]
        if self._pool is None:
            self._pool = multiprocessing.get_context("fork").Pool(self._workers)
        # A task per item costs a round trip each; one chunk per worker leaves a worker idle behind a slow chunk.
        chunksize = max(1, len(items) // (self._workers * CHUNKS_PER_WORKER))
        return self._pool.map(function, items, chunksize)

    def close(self) -> None:
        # terminate, not close: after an interrupted map() a worker may be gone with its task, and close() would
        # then wait for that task forever; after a finished map() the workers hold nothing worth waiting for.
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
