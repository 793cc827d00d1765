"""summary.json: what the morning reviewer reads first."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from agent.llm import RequestStats

TaskStatus = Literal["committed", "no_changes", "failed"]


class TokenTotals(BaseModel):
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    draft_tokens: int = 0
    draft_accepted: int = 0

    @classmethod
    def of(cls, requests: list[RequestStats]) -> TokenTotals:
        return cls(
            prompt_tokens=sum(r.prompt_tokens for r in requests),
            cached_tokens=sum(r.cached_tokens for r in requests),
            completion_tokens=sum(r.completion_tokens for r in requests),
            draft_tokens=sum(r.draft_tokens for r in requests),
            draft_accepted=sum(r.draft_accepted for r in requests),
        )

    def __add__(self, other: TokenTotals) -> TokenTotals:
        return TokenTotals(**{name: getattr(self, name) + getattr(other, name) for name in TokenTotals.model_fields})


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
    tokens: TokenTotals = TokenTotals()
    wall_time_s: float = 0.0
    warnings: list[str] = []


class RunSummary(BaseModel):
    run_id: str
    repo: str
    model: str
    server_url: str
    tasks: list[TaskSummary] = []
    tokens: TokenTotals = TokenTotals()
    wall_time_s: float = 0.0
    warnings: list[str] = []

    @property
    def exit_code(self) -> int:
        return 1 if any(task.status == "failed" for task in self.tasks) else 0
