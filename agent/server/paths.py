"""Where refactor-agent keeps what outlives one process: launcher state files and saved KV caches."""

from __future__ import annotations

import os
from pathlib import Path


def default_state_dir() -> Path:
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "refactor-agent"


def default_kv_cache_dir() -> Path:
    """The --slot-save-path of the servers the launcher starts: saved prefixes survive restarts and nights."""
    return default_state_dir() / "kv-cache"
