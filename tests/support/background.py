"""Processes a test only waits for, started as the session's collection ends: they run on the other core while the
serial session goes on, and the test that marks one (`@pytest.mark.started_at_collection(argv)`) takes its result,
as the same command started then would have given it (such a command reads nothing the session writes).
Deselected, nothing starts; a test run without the session's collection hook starts it when it asks."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Sequence

import pytest

_started: dict[tuple[str, ...], subprocess.Popen[bytes]] = {}
_ended: dict[tuple[str, ...], subprocess.CompletedProcess[bytes]] = {}


def start_at_collection(items: Iterable[pytest.Item]) -> None:
    for item in items:
        for marker in item.iter_markers("started_at_collection"):
            _start(tuple(marker.args[0]))


def _start(argv: tuple[str, ...]) -> subprocess.Popen[bytes]:
    if argv not in _started:
        _started[argv] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return _started[argv]


def finished(argv: Sequence[str]) -> subprocess.CompletedProcess[bytes]:
    """The command's run, started at collection (or now), once it ended: its exit code and output (stderr in it)."""
    key = tuple(argv)
    if key not in _ended:
        process = _start(key)
        output, _ = process.communicate(timeout=600)
        _ended[key] = subprocess.CompletedProcess(list(argv), process.returncode, output)
    return _ended[key]
