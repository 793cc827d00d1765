"""summary.json: what the morning reviewer reads first."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from agent.metrics import MetricsSummary

TaskStatus = Literal["committed", "no_changes", "failed"]


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
    uncommitted_files: dict[str, str] = {}  # new files the commit left out (too large, a nested repository): why


class RunSummary(BaseModel):
    run_id: str
    repo: str
    model: str
    server_url: str
    speculation_configured: bool = False
    tasks: list[TaskSummary] = []
    wall_time_s: float = 0.0
    metrics: MetricsSummary | None = None
    warnings: list[str] = []

    @property
    def exit_code(self) -> int:
        return 1 if any(task.status == "failed" for task in self.tasks) else 0
