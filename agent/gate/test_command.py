"""Which command runs a repository's tests, and why: the user's setting, else what the repository itself says.

In order: the user's setting; tox's test environment or nox's test session; the Makefile's `test` target; a CI
workflow's test step; then the runners a repository's layout names (Django's `tests/runtests.py`, pytest, unittest,
npm, go, cargo, make). Only the line that runs the tests is taken (agent/gate/runner_line.py): never tox, nox or pip,
which would need the network at test time. The repository's files are read on the host, before the model runs, so
they are treated as hostile (agent/gate/test_command_sources.py); the command itself runs only in the sandbox.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from pydantic import BaseModel

from agent.gate.runner_line import PYTHON
from agent.gate.test_command_sources import (
    ci_command,
    is_regular,
    makefile_command,
    nox_command,
    read_regular,
    tox_command,
)

USER_SETTING = "--test-cmd"
PYTEST = f"{PYTHON} -m pytest -q"
PYTEST_MARKERS = ("pytest.ini", "conftest.py", "tests/conftest.py", "test/conftest.py")
RUNTESTS = ("tests/runtests.py", "runtests.py")
# Test files read to tell pytest's from unittest's, and how much of each.
SCANNED_TEST_FILES = 200
SCANNED_BYTES = 64 * 1024


class SuiteCommand(BaseModel):
    """The test command and where it came from: `tox.ini [testenv] commands`, `--test-cmd`, `pytest.ini`."""

    command: str
    source: str


def _is_test_file(name: str) -> bool:
    return name.startswith("test_") and name.endswith(".py")


def _test_files(root: Path) -> list[Path]:
    """test_*.py at the top, then under top-level test* folders (links to folders are not entered), capped."""
    with os.scandir(root) as entries:
        tops = sorted(entries, key=lambda entry: entry.name)
    found = [Path(entry.path) for entry in tops if _is_test_file(entry.name)]
    for top in tops:
        if top.name.startswith("test") and top.is_dir(follow_symlinks=False):
            for folder, _subfolders, files in os.walk(top.path):  # os.walk does not follow links by default
                found += [Path(folder) / name for name in sorted(files) if _is_test_file(name)]
                if len(found) >= SCANNED_TEST_FILES:
                    return found[:SCANNED_TEST_FILES]
    return found


def _pytest_configured(root: Path) -> str | None:
    """The file that says the project uses pytest, if one does."""
    for marker in PYTEST_MARKERS:
        if os.path.lexists(root / marker):
            return marker
    checks = (("pyproject.toml", "[tool.pytest"), ("setup.cfg", "[tool:pytest]"), ("tox.ini", "[pytest]"))
    return next((file for file, section in checks if section in read_regular(root / file)), None)


def _unittest_command(root: Path, files: list[Path]) -> str:
    """`python3 -m unittest discover`, started where the tests are (as a package when the folder is one)."""
    folders = {file.relative_to(root).parts[0] for file in files if len(file.relative_to(root).parts) > 1}
    if not folders:
        return f"{PYTHON} -m unittest discover"
    folder = sorted(folders)[0]
    top = " -t ." if os.path.lexists(root / folder / "__init__.py") else ""
    return f"{PYTHON} -m unittest discover -s {folder}{top}"


def _python_runner(root: Path) -> SuiteCommand | None:
    for script in RUNTESTS:
        if is_regular(root / script):
            return SuiteCommand(command=f"{PYTHON} {script}", source=f"{script} (the project's own runner)")
    configured = _pytest_configured(root)
    if configured is not None:
        return SuiteCommand(command=PYTEST, source=f"pytest configured in {configured}")
    files = _test_files(root)
    if not files:
        return None
    texts = [read_regular(file, SCANNED_BYTES) for file in files]
    if not any("pytest" in text for text in texts) and any("unittest" in text for text in texts):
        return SuiteCommand(command=_unittest_command(root, files), source="test files written for unittest")
    return SuiteCommand(command=PYTEST, source="test files (test_*.py) found")


def _npm_test_script(root: Path) -> bool:
    try:
        scripts = json.loads(read_regular(root / "package.json")).get("scripts", {})
    except (json.JSONDecodeError, AttributeError):
        return False
    return isinstance(scripts, dict) and "test" in scripts


def _layout_runner(root: Path) -> SuiteCommand | None:
    """The runners a repository's layout names, in the order a polyglot repository's own CI most often uses."""
    python = _python_runner(root)
    if python is not None:
        return python
    if _npm_test_script(root):
        return SuiteCommand(command="npm test", source="package.json scripts.test")
    if os.path.lexists(root / "go.mod"):
        return SuiteCommand(command="go test ./...", source="go.mod")
    if os.path.lexists(root / "Cargo.toml"):
        return SuiteCommand(command="cargo test", source="Cargo.toml")
    if re.search(r"^test\s*:(?!=)", read_regular(root / "Makefile"), re.M):
        return SuiteCommand(command="make test", source="Makefile target test (no test runner in its recipe)")
    return None


def detect_test_command(root: Path) -> SuiteCommand | None:
    """What the repository says runs its tests; None when it says nothing."""
    for reader in (tox_command, nox_command, makefile_command, ci_command):
        found = reader(root)
        if found is not None:
            return SuiteCommand(command=found[0], source=found[1])
    return _layout_runner(root)


def choose_test_command(setting: str | None, root: Path) -> SuiteCommand | None:
    """The user's setting wins; else detection."""
    if setting:
        return SuiteCommand(command=setting, source=USER_SETTING)
    return detect_test_command(root)
