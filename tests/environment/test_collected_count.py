"""The environment stage's count of the tests a suite collects, read from pytest's own --collect-only output (the
host's pytest, run for real on a tiny project), deselected tests left out as pytest leaves them out."""

from __future__ import annotations

import atexit
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.environment.stage import collected_count

from support.early import BACKGROUND, started_early

# Deselects every test whose name ends in "_slow", the way click's conftest deselects 31,000 of its 33,016.
CONFTEST = """
def pytest_collection_modifyitems(config, items):
    slow = [item for item in items if item.name.endswith("_slow")]
    config.hook.pytest_deselected(items=slow)
    items[:] = [item for item in items if item not in slow]
"""


OPTIONS = {"header and summary": (), "quiet: summary only": ("-q",)}
# Blocked as this repository's own pytest configuration blocks them: loading anyio's and platformdirs' plugins was
# half of each run's CPU. The header still lists the other plugins loaded (pytest-timeout's, a dev dependency).
PLUGINS_BLOCKED = ("-p", "no:cacheprovider", "-p", "no:anyio", "-p", "no:platformdirs")
SLOW = (0, 3)


@started_early
def collected() -> Callable[[], dict[tuple[int, str], list[str]]]:
    """The non-blank lines of `pytest --collect-only` (with each of OPTIONS) in a project of two tests and `slow`
    more that its conftest deselects, per (slow, options): the four runs started as collection ends."""
    root = Path(tempfile.mkdtemp(prefix="collected-count-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    runs = {}
    for slow in SLOW:
        project = root / f"slow-{slow}"
        project.mkdir()
        (project / "conftest.py").write_text(CONFTEST)
        names = [f"test_{n}" for n in range(2)] + [f"test_{n}_slow" for n in range(slow)]
        (project / "test_some.py").write_text("".join(f"def {name}():\n    pass\n\n\n" for name in names))
        for name, options in OPTIONS.items():
            runs[slow, name] = subprocess.Popen(
                [*BACKGROUND, sys.executable, "-m", "pytest", "--collect-only", *PLUGINS_BLOCKED, *options],
                cwd=project,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
    return lambda: {
        key: [line for line in run.communicate()[0].splitlines() if line.strip()] for key, run in runs.items()
    }


@pytest.mark.parametrize("options", list(OPTIONS))
@pytest.mark.parametrize("slow", SLOW)
def test_the_count_is_of_the_tests_that_run_not_of_those_deselected(
    collected: dict[tuple[int, str], list[str]], options: str, slow: int
) -> None:
    lines = collected[slow, options]
    assert collected_count(lines) == 2, lines


def test_the_header_alone_says_how_many_are_selected() -> None:
    # What pytest prints first (non-quiet), should the summary line be cut off (a timeout, a crash).
    assert collected_count(["collected 33016 items / 31000 deselected / 2016 selected", "<Module test_a.py>"]) == 2016
    assert collected_count(["collected 7 items", "<Module test_a.py>"]) == 7
    assert collected_count(["no tests ran", "ERROR: file or directory not found: nowhere"]) is None
