"""The default dispatch: here, one task after the other, on the run's own model and server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from agent.protocol.config import RunConfig
from agent.protocol.records import TaskSummary

if TYPE_CHECKING:
    from agent.run.run import Run


class InOrder:
    def run_tasks(self, run: Run, tasks: list[tuple[int, RunConfig, str]]) -> Iterator[TaskSummary]:
        for index, config, task in tasks:
            run.prepare_repository(config)
            yield run.run_task(run.new_task(index, config, task))
