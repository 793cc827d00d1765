"""A run's tasks over a fleet of servers and their slots (--parallel): as many tasks at once as the fleet has
seats, one thread each.

Each task runs the run's own stages (`Run.run_task`) in a task context of its own with its own FleetModel, so its
events carry its index and the server and slot it was given (TaskServer); the pool decides which seat
(seats.py). Each seat of a server the launcher started keeps its own saved-prefix cache over the server's
one save directory, so tasks on one commit prefill their repository once (agent/server/kv_cache.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed

from agent.dispatch.seats import FleetModel, ServerPool
from agent.protocol.config import LLMConfig, RunConfig
from agent.protocol.records import TaskSummary
from agent.run.interrupt import Interrupted
from agent.run.run import Run
from agent.server.api import LlamaServerAPI
from agent.server.kv_cache import PrefixCache


class FleetDispatch:
    def __init__(self, llm: LLMConfig, pool: ServerPool | None = None) -> None:
        self.llm = llm
        self.pool = pool or ServerPool(llm.fleet)
        self.caches: dict[tuple[str, int], PrefixCache] = {}

    def run_tasks(self, run: Run, tasks: list[tuple[int, RunConfig, str]]) -> Iterator[TaskSummary]:
        # Here, in the main thread, before any task starts: each repository's scratch and environment are made
        # once, not by two tasks at the same time.
        first: dict[object, RunConfig] = {}
        for _index, config, _task in tasks:
            first.setdefault(config.repo, config)
        for config in first.values():
            run.prepare_repository(config)
        self.caches = self._seat_caches(run)
        threads = ThreadPoolExecutor(max_workers=self.pool.size, thread_name_prefix="task")
        futures: list[Future[TaskSummary]] = [
            threads.submit(self._one, run, index, config, task) for index, config, task in tasks
        ]
        ended: set[int] = set()
        try:
            for future in as_completed(futures):
                ended.add(id(future))
                yield future.result()
        except Interrupted as stop:
            # Signals land in this (main) thread. No task starts any more, and each task in flight raises
            # Interrupted in its own thread at its next model request, settling as the runner settles an
            # interrupted task (an interrupted commit, its patch); their outcomes still go into the summary.
            self.pool.stop(stop.signum)
            for future in futures:
                future.cancel()
            for future in futures:
                if id(future) not in ended and not future.cancelled():
                    yield future.result()
            raise
        finally:
            threads.shutdown(wait=True, cancel_futures=True)

    def _seat_caches(self, run: Run) -> dict[tuple[str, int], PrefixCache]:
        """A saved-prefix cache per seat of each server that has one (the run's own server: the run's cache)."""
        caches = {}
        for url in self.pool.live():
            if url == run.server_url:
                server = run.server.prefix_cache if run.server is not None else None
            else:  # None unless the launcher started it here with --slot-save-path
                server = PrefixCache.for_server(LlamaServerAPI(url), settings=self.llm.effort, notify=run.emit)
            if server is None:
                continue
            for seat in self.pool.seats():
                if seat.url == url:
                    caches[(url, seat.slot)] = server.for_slot(seat.slot, check=self.pool.check_stop)
        return caches

    def _one(self, run: Run, index: int, config: RunConfig, task: str) -> TaskSummary:
        live = self.pool.live()
        # The repository's tokens are counted on a live server of the fleet (they share one model).
        context = run.new_task(index, config, task, server_url=live[0] if live else run.server_url, parallel=True)
        model = context.model = FleetModel(self.pool, self.llm, emit=context.emit, caches=self.caches)
        try:
            return run.run_task(context)
        finally:
            model.release()
