"""The user's cache folder as the session found it ($XDG_CACHE_HOME, else ~/.cache), read once, before conftest.py
gives the session a cache folder of its own: what the tests must still find where the user keeps it is named
from here (pip's wheel cache, the llama-server wheel scripts/setup-llama.sh built)."""

from __future__ import annotations

import os
from pathlib import Path

USER_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
