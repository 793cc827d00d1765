"""Packs a whole repository into the model's context: every text file when it fits, a ranked selection when not."""

from agent.packing.options import PackError, PackOptions
from agent.packing.packer import PackedRepository, pack_repository
from agent.packing.stats import FileStat, PackStats

__all__ = ["FileStat", "PackError", "PackOptions", "PackStats", "PackedRepository", "pack_repository"]
