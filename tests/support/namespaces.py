"""A scenario run in a child process inside a loopback-only network namespace (needs root): nothing reaches the
machine's network from there, loopback works (for a scripted server), and so does Docker, whose daemon is reached
over its unix socket (a path, not a network address)."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import subprocess
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

CLONE_NEWNET = 0x40000000  # <sched.h>
SCENARIO_TIMEOUT_S = 540


def _in_loopback_namespace(scenario: Callable[..., dict[str, Any]], arguments: tuple[str, ...], queue: Any) -> None:
    try:
        os.setsid()  # one process group with the processes it starts, so the parent can end them all
        # os.unshare arrived in Python 3.12; the C call is the same.
        if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed (it needs root)")
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        queue.put(("ok", scenario(*arguments)))
    except BaseException:
        queue.put(("error", traceback.format_exc()))


def in_loopback_namespace(scenario: Callable[..., dict[str, Any]], tmp_path: Path, *arguments: str) -> dict[str, Any]:
    """What `scenario(str(tmp_path), *arguments)` returned, run in a child process in a loopback-only network
    namespace. The scenario is a module-level function (the child is spawned: it imports it by name)."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_in_loopback_namespace, args=(scenario, (str(tmp_path), *arguments), queue))
    child.start()
    try:
        status, results = queue.get(timeout=SCENARIO_TIMEOUT_S)
        child.join(60)
    finally:
        if child.is_alive():  # a hung scenario: end it with the processes it started (its process group)
            os.killpg(child.pid, signal.SIGKILL)
    assert status == "ok", results
    return results
