"""Whether a container's process table is full: a fork bomb leaves it so, and then nothing in it can start."""

import logging
import time
from pathlib import Path
from typing import Any

import docker
import docker.errors

from sandbox.errors import one_line

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Processes come and go even in a fork bomb, so a table this close to its limit counts as full.
FULL_MARGIN_SHARE = 1 / 32
MIN_FULL_MARGIN = 2
# The daemon samples stats once a second: a second request within that second waits for the next sample.
STATS_EVERY_S = 1.0

log = logging.getLogger(__name__)


def pids_cgroup(pid: int, container_id: str, root: Path = CGROUP_ROOT) -> Path | None:
    """The container's pids cgroup directory on this host (cgroup v1 or v2), found through its init process."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            candidate = root / "pids" / path.lstrip("/")
        elif controllers == "":  # the unified (v2) hierarchy
            candidate = root / path.lstrip("/")
        else:
            continue
        # The pid is as the daemon sees it: in another pid namespace it could name some other process.
        if container_id in path and (candidate / "pids.current").is_file():
            return candidate
    return None


class ProcessTable:
    """Reads the process count of one container: from its cgroup files when the daemon runs on this host
    (microseconds), else from the daemon's stats (which wait up to a second when asked twice in a second)."""

    def __init__(self, client: docker.DockerClient, container: Any, *, cgroup_root: Path = CGROUP_ROOT) -> None:
        self._client = client
        self._container = container
        container.reload()
        self.cgroup = pids_cgroup(int(container.attrs["State"]["Pid"]), container.id, cgroup_root)
        self._last_stats = float("-inf")

    def counts(self) -> tuple[int, int] | None:
        """(processes, limit), or None when the count cannot be read (or not without waiting)."""
        if self.cgroup is not None:
            try:
                current = int((self.cgroup / "pids.current").read_text())
                limit = (self.cgroup / "pids.max").read_text().strip()
            except (OSError, ValueError):
                return None
            return (current, int(limit)) if limit.isdigit() else None
        if time.monotonic() - self._last_stats < STATS_EVERY_S:
            return None  # not worth a wait: the next look comes soon enough
        self._last_stats = time.monotonic()
        try:
            stats = self._client.api.stats(self._container.id, stream=False, one_shot=True)
        except docker.errors.APIError as error:
            log.debug("no process count for %s: %s", self._container.name, one_line(error))
            return None
        pids = stats.get("pids_stats") or {}
        return (pids["current"], pids["limit"]) if "current" in pids and pids.get("limit") else None

    def full(self) -> bool:
        counts = self.counts()
        if counts is None:
            return False
        current, limit = counts
        return current >= limit - max(MIN_FULL_MARGIN, int(limit * FULL_MARGIN_SHARE))
