"""Watching the host disk under the workspace: a bind mount that no container limit bounds."""

import os
from pathlib import Path


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer can still use on the filesystem holding `path` (cheap: one statvfs)."""
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def human_size(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


class DiskWatch:
    """Tells when a running command is filling the disk that holds the workspace.

    Growth is the drop of free space since the watch began (the sandbox's start), so it counts everything
    written to that filesystem meanwhile: it errs on the side of stopping early. A command is only blamed
    while free space is falling during it, so a command that deletes files is never stopped.
    """

    def __init__(self, path: Path, *, growth_cap_bytes: int, free_floor_bytes: int) -> None:
        self.path = path
        self.growth_cap_bytes = growth_cap_bytes
        self.free_floor_bytes = free_floor_bytes
        self.baseline_free = free_bytes(path)
        self._command_start_free = self.baseline_free

    def command_started(self) -> None:
        self._command_start_free = free_bytes(self.path)

    def breach(self) -> str | None:
        """Why the current command counts as filling the disk, in one line; None while it does not."""
        free = free_bytes(self.path)
        if free >= self._command_start_free:
            return None
        if free < self.free_floor_bytes:
            floor = human_size(self.free_floor_bytes)
            return f"{human_size(free)} left free on the disk holding the workspace, under the {floor} floor"
        grown = self.baseline_free - free
        if grown > self.growth_cap_bytes:
            return f"the workspace grew by {human_size(grown)}, over its {human_size(self.growth_cap_bytes)} cap"
        return None
