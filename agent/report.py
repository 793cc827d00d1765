"""summary.json: what the morning reviewer reads first."""

from __future__ import annotations

import signal
from typing import Literal

from pydantic import BaseModel

from agent.metrics import MetricsSummary

TaskStatus = Literal["committed", "no_changes", "failed", "interrupted"]
RunStatus = Literal["completed", "interrupted"]


class TaskSummary(BaseModel):
    index: int
    task: str
    status: TaskStatus
    reason: str
    branch: str | None = None
    base_commit: str | None = None
    commit: str | None = None
    summary: str = ""
    turns: int = 0
    wall_time_s: float = 0.0
    metrics: MetricsSummary | None = None
    warnings: list[str] = []


class RunSummary(BaseModel):
    run_id: str
    repo: str
    model: str
    server_url: str
    speculation_configured: bool = False
    status: RunStatus = "completed"
    interrupted_by: str | None = None  # the signal's name, e.g. SIGTERM
    tasks: list[TaskSummary] = []
    wall_time_s: float = 0.0
    metrics: MetricsSummary | None = None
    warnings: list[str] = []

    @property
    def exit_code(self) -> int:
        if self.interrupted_by is not None:  # as a shell reports a process that a signal ended
            return 128 + signal.Signals[self.interrupted_by].value
        return 1 if any(task.status == "failed" for task in self.tasks) else 0
