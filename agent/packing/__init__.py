"""Packs a whole repository into the model's context: every text file when it fits, a ranked selection when not.

Exports load on first use (PEP 562): importing the package (as `refactor-agent --help` does) costs nothing until
a pack is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.packing.options import PackError, PackOptions
    from agent.packing.packer import PackedRepository, pack_repository
    from agent.packing.stats import FileStat, PackStats

_EXPORTS = {
    "FileStat": "agent.packing.stats",
    "PackError": "agent.packing.options",
    "PackOptions": "agent.packing.options",
    "PackStats": "agent.packing.stats",
    "PackedRepository": "agent.packing.packer",
    "pack_repository": "agent.packing.packer",
}
__all__ = ["FileStat", "PackError", "PackOptions", "PackStats", "PackedRepository", "pack_repository"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'agent.packing' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
