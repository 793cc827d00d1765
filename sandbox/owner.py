"""Which process on which host owns a sandbox container, so leftovers of dead runs can be told apart."""

import os
import socket
from pathlib import Path


def _start_time(pid: int) -> str | None:
    """The kernel's start time of `pid`: with the pid it names one process even after pids are reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name in parentheses may contain spaces; fields after it are fixed, starttime is the 22nd.
    return stat.rsplit(")", 1)[1].split()[19]


def current_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def owner_is_gone(owner: str) -> bool:
    """True only when the owner is known to have ended: owners on another host are never judged gone."""
    host, _, rest = owner.partition(":")
    pid, _, start_time = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    return _start_time(int(pid)) != start_time
