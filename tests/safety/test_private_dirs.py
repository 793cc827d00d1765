"""Run records and caches are the user's alone (0700): a transcript holds the whole repository, the caches and
saved prefixes are made from it."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.gate.baseline import BaselineCache
from agent.gate.results import SuiteRun
from agent.packing import PackOptions, pack_repository
from agent.record.journal import RunJournal
from agent.safety.private_dirs import private_dir

from support.repos import make_repo


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    """The umask most users have: without care, new folders would be readable by everyone (0755)."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_a_private_dir_and_its_missing_parents_are_0700_and_an_existing_parent_keeps_its_mode(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    target = private_dir(shared / "refactor-agent" / "runs")
    assert (mode(shared / "refactor-agent"), mode(target), mode(shared)) == (0o700, 0o700, 0o755)
    assert private_dir(target) == target  # again: nothing to do


def test_a_run_record_and_the_baseline_cache_are_private(tmp_path: Path) -> None:
    runs = tmp_path / "state" / "runs"
    journal = RunJournal(runs, "20261201-010000-abcd")
    with contextlib.closing(journal):
        assert (mode(tmp_path / "state"), mode(runs), mode(journal.directory)) == (0o700, 0o700, 0o700)
    (tmp_path / "mine").mkdir(mode=0o755)  # a runs directory of the user's own: each record in it is still private
    journal = RunJournal(tmp_path / "mine", "20261201-010000-abce")
    with contextlib.closing(journal):
        assert (mode(tmp_path / "mine"), mode(journal.directory)) == (0o755, 0o700)
    BaselineCache(runs).put("key", SuiteRun(command="pytest", ran=True))
    assert mode(runs / ".baselines") == 0o700


def test_the_packers_caches_are_private(tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "refactor-agent"
    pack_repository(make_repo(tmp_path / "repo"), PackOptions(cache_dir=cache))
    assert (mode(tmp_path / "cache"), mode(cache)) == (0o700, 0o700)
    assert all(mode(path) == 0o700 for path in cache.rglob("*") if path.is_dir())
