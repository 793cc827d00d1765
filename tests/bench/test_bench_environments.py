"""bench/environments.py: its manifest pins real commits, and one repository that cannot run is a row, not a stop."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from support.repos import make_repo

BENCH = Path(__file__).resolve().parents[2] / "bench" / "environments.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_environments", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the models' annotations through it
    spec.loader.exec_module(module)
    return module


def test_the_manifest_pins_each_repository_to_a_full_commit(bench: ModuleType) -> None:
    entries = bench.load_manifest()
    assert len(entries) >= 12
    assert len({entry.name for entry in entries}) == len(entries)
    assert all(re.fullmatch(r"[0-9a-f]{40}", entry.commit) for entry in entries)
    assert all(re.fullmatch(r"[\w.-]+/[\w.-]+", entry.repository) for entry in entries)


def test_a_missing_or_moved_checkout_is_a_row_saying_why(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench, "OUT", tmp_path / "out")
    entry = bench.CorpusEntry(name="tiny", repository="example/tiny", commit="0" * 40, shape="", why="")
    missing = bench.measure(None, tmp_path, entry, timeout_s=60, cold=False, check=False)
    assert missing.error is not None and "no such directory" in missing.error
    make_repo(tmp_path / "tiny", {"a.py": "x = 1\n"})
    moved = bench.measure(None, tmp_path, entry, timeout_s=60, cold=False, check=False)
    assert moved.error is not None and "the manifest pins 000000000000" in moved.error
    assert not moved.meets and "the manifest pins" in bench.table([missing, moved])


def test_a_row_names_the_code_that_ran_not_the_checkout_head_at_its_time(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Corpus run 5: commits made in the checkout during a long run were recorded as the code of the later rows,
    while the process kept running the code it had imported."""
    monkeypatch.setattr(bench, "OUT", tmp_path / "out")
    monkeypatch.setattr(bench, "agent_commit", lambda: "moved-on")
    entry = bench.CorpusEntry(name="tiny", repository="example/tiny", commit="0" * 40, shape="", why="")
    row = bench.measure(None, tmp_path, entry, timeout_s=60, cold=False, check=False)
    assert row.agent_commit == bench.AGENT_COMMIT != "moved-on"
