"""Finding how a repository runs its tests when the user did not say.

This reads the repository's files on the host, before the model runs, so it treats them as hostile: a link is
never followed (a `pyproject.toml` pointing at a pipe or /dev/zero, a `tests` pointing at /), only regular files
are read, and only their first bytes.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

# Every build file worth reading here is far smaller; one that is not is read as far as this.
MAX_READ_BYTES = 1024 * 1024


def _read(path: Path) -> str:
    """The start of a regular file that is not a link; "" for anything else."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    with open(handle, "rb") as file:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return ""
        return file.read(MAX_READ_BYTES).decode("utf-8", errors="replace")


def _has_test_files(root: Path) -> bool:
    """test_*.py at the top, or anywhere under a top-level test* folder; links to folders are not entered."""
    with os.scandir(root) as entries:
        tops = list(entries)
    if any(entry.name.startswith("test_") and entry.name.endswith(".py") for entry in tops):
        return True
    for top in tops:
        if top.name.startswith("test") and top.is_dir(follow_symlinks=False):
            for _folder, _subfolders, files in os.walk(top.path):  # os.walk does not follow links by default
                if any(name.startswith("test_") and name.endswith(".py") for name in files):
                    return True
    return False


def _has_python_tests(root: Path) -> bool:
    markers = ("pytest.ini", "conftest.py", "tox.ini")
    if any(os.path.lexists(root / marker) for marker in markers):
        return True
    return "[tool.pytest" in _read(root / "pyproject.toml") or _has_test_files(root)


def _npm_test_script(root: Path) -> bool:
    try:
        scripts = json.loads(_read(root / "package.json")).get("scripts", {})
    except (json.JSONDecodeError, AttributeError):
        return False
    return isinstance(scripts, dict) and "test" in scripts


def _make_test_target(root: Path) -> bool:
    return re.search(r"^test\s*:", _read(root / "Makefile"), re.M) is not None


def detect_test_command(root: Path) -> str | None:
    """First match wins, in the order a polyglot repo's own CI most often uses."""
    if _has_python_tests(root):
        return "python3 -m pytest -q"
    if _npm_test_script(root):
        return "npm test"
    if os.path.lexists(root / "go.mod"):
        return "go test ./..."
    if os.path.lexists(root / "Cargo.toml"):
        return "cargo test"
    if _make_test_target(root):
        return "make test"
    return None
