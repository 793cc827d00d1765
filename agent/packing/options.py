"""What a caller can ask of the packer."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from agent.protocol.effort import Effort

PackFormat = Literal["xml", "markdown"]
FileOrder = Literal["churn", "path"]


class PackError(Exception):
    """A one-line, user-facing reason the repository cannot be packed."""


class PackOptions(BaseModel):
    budget_tokens: int | None = Field(None, ge=0, description="None: n_ctx - output reserve - headroom, or unlimited")
    task: str | None = Field(None, description="biases the ranking when the repository does not fit")
    server_url: str | None = Field(None, description="llama-server for exact counts; None: offline estimate")
    format: PackFormat = "xml"
    order: FileOrder = Field(
        "churn", description="churn: files unchanged longest first, so an edit keeps the prefix before it cached"
    )
    include_untracked: bool = False
    include_generated: bool = Field(False, description="vendored, minified, generated, lock files and LFS pointers")
    include_secrets: bool = False
    effort: Effort = "max"
    output_reserve_tokens: int | None = Field(None, ge=0, description="overrides the effort-dependent reserve")
    cache_dir: Path | None = None
    max_file_bytes: int = Field(8 * 1024 * 1024, ge=1, description="larger text files are listed, not read")
    tokenize_concurrency: int = Field(4, ge=1, le=32, description="/tokenize requests in flight")


def default_cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "refactor-agent"


def resolved_cache_dir(options: PackOptions) -> Path:
    return options.cache_dir if options.cache_dir is not None else default_cache_dir()
