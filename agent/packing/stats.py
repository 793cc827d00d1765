"""The stats JSON of a pack: what was listed, shown, outlined or left out and why, and what it cost."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from pydantic import BaseModel, Field

FileView = Literal["full", "outline", "path", "excluded"]


class FileStat(BaseModel):
    path: str
    view: FileView
    reason: str | None = None  # why it is excluded, or not shown in full
    bytes: int | None = None
    tokens_full: int | None = Field(None, description="tokens of the file rendered in full, wrapper included")
    tokens_rendered: int = Field(0, description="tokens of what was actually rendered for it")


class PackStats(BaseModel):
    commit: str | None
    format: str
    counts: Literal["exact", "estimated"]
    tokenizer: str | None = Field(None, description="the server's model path when counts are exact")
    tokens_per_byte: float = Field(description="the ratio used for estimates, or measured when exact")
    budget_tokens: int | None
    budget_source: str
    total_tokens: int = 0
    files_listed: int = 0
    files_full: int = 0
    files_outline: int = 0
    files_path_only: int = 0
    files_excluded: int = 0
    elapsed_s: dict[str, float] = Field(default_factory=dict)
    files: list[FileStat] = Field(default_factory=list)


@contextmanager
def timed(stats: PackStats, phase: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        stats.elapsed_s[phase] = round(stats.elapsed_s.get(phase, 0.0) + time.perf_counter() - started, 4)
