"""Finding how a repository runs its tests when the user did not say."""

from __future__ import annotations

import json
import re
from pathlib import Path


def _has_python_tests(root: Path) -> bool:
    markers = ("pytest.ini", "conftest.py", "tox.ini")
    if any((root / marker).exists() for marker in markers):
        return True
    pyproject = root / "pyproject.toml"
    if pyproject.exists() and "[tool.pytest" in pyproject.read_text(errors="replace"):
        return True
    return any(root.glob("test*/**/test_*.py")) or any(root.glob("test_*.py"))


def _npm_test_script(root: Path) -> bool:
    package = root / "package.json"
    if not package.exists():
        return False
    try:
        scripts = json.loads(package.read_text(errors="replace")).get("scripts", {})
    except (json.JSONDecodeError, AttributeError):
        return False
    return isinstance(scripts, dict) and "test" in scripts


def _make_test_target(root: Path) -> bool:
    makefile = root / "Makefile"
    return makefile.exists() and re.search(r"^test\s*:", makefile.read_text(errors="replace"), re.M) is not None


def detect_test_command(root: Path) -> str | None:
    """First match wins, in the order a polyglot repo's own CI most often uses."""
    if _has_python_tests(root):
        return "python3 -m pytest -q"
    if _npm_test_script(root):
        return "npm test"
    if (root / "go.mod").exists():
        return "go test ./..."
    if (root / "Cargo.toml").exists():
        return "cargo test"
    if _make_test_target(root):
        return "make test"
    return None
