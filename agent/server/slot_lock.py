"""A slot of a shared server for one process. Ray runs a node's tasks in processes of their own: pinned to the same
slot, the second task's requests would wait for the first's, and each would evict the other's prefix.

A process takes the first slot whose lock file it can lock. flock is released by the kernel when the process dies,
so a crashed task never keeps its slot.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from agent.safety.private_dirs import private_dir
from agent.server.api import LlamaServerAPI, ServerError
from agent.server.paths import default_state_dir

POLL_S = 1.0  # more tasks than slots on the node: look for a free slot this often


def server_slots(server_url: str) -> int:
    """How many slots the server has; 1 when it does not say (the task's first request reports a dead server)."""
    try:
        with LlamaServerAPI(server_url, timeout_s=10.0) as api:
            return max(1, int(api.props().get("total_slots", 1)))
    except (ServerError, httpx.HTTPError, ValueError):
        return 1


@contextlib.contextmanager
def claim_slot(
    server_url: str, slots: int, *, lock_dir: Path | None = None, sleep: Callable[[float], None] = time.sleep
) -> Iterator[int]:
    """One of the server's `slots` slots, this process's until the block ends; waits while all are taken, POLL_S
    (through `sleep`) between looks."""
    name = hashlib.sha256(server_url.encode()).hexdigest()[:16]
    directory = (lock_dir or default_state_dir() / "slot-locks") / name
    private_dir(directory)
    while True:
        for slot in range(slots):
            handle = (directory / f"{slot}.lock").open("a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield slot
            finally:
                handle.close()
            return
        sleep(POLL_S)
