"""Test infrastructure: the files a test command reads besides the tests themselves.

A change to one of them changes what the suite's word is worth: a root conftest.py hook can turn every failure
into a pass. The gate still runs the task's version (a rename may have to change conftest.py, and running the base
commit's instead would test something else than what is committed), but the verdict is marked (`verified*`) and
the files are named wherever it is shown. Contents are read from git's blobs, bounded, never from the host's paths.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable
from fnmatch import fnmatch
from pathlib import PurePosixPath

from agent.gate.reading import SIDES, ReadFiles

PYTEST_CONFIG = ("pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini")
# At any depth: pytest's per-directory hooks and its configuration, nox's, Python's start-up hooks.
ALWAYS = ("conftest.py", *PYTEST_CONFIG, "noxfile.py", "sitecustomize.py", "usercustomize.py")
ALWAYS_PATTERNS = ("*.pth",)
# Shared by many tools: test infrastructure when either side of the change mentions pytest (a [tool.pytest...] or
# [tool:pytest] section, addopts, a pytest11 entry point).
SHARED_CONFIG = ("pyproject.toml", "setup.cfg")
# What a runner named in the test command reads at the repository's top, besides the command line.
RUNNER_FILES = {
    "make": ("Makefile", "makefile", "GNUmakefile"),
    "npm": ("package.json",),
    "yarn": ("package.json",),
    "pnpm": ("package.json",),
    "jest": ("jest.config.js", "jest.config.ts", "jest.config.mjs", "jest.config.cjs", "package.json"),
    "cargo": (".cargo/config.toml", ".cargo/config", "build.rs"),
}
# Where pytest names plugins: `-p NAME` in addopts or the command, `pytest_plugins = [...]` in a conftest.py.
_DASH_P = re.compile(r"(?:^|\s)-p\s*(?!no:)([\w.]+)")
_PYTEST_PLUGINS = re.compile(r"^pytest_plugins\s*[:=][^\n]*(?:\n[ \t]+[^\n]*)*", re.MULTILINE)
_MODULE_NAME = re.compile(r"""["']([\w.]+)["']""")
_ROOT_CONFIG = (*PYTEST_CONFIG, *SHARED_CONFIG, "conftest.py")
# The names git is asked for among ignored files (a task may hide a conftest.py with a .gitignore line); not inside
# the environments a runner builds in the worktree (tox's, nox's, a virtualenv: their .pth files are the runner's,
# and a test run the model starts makes them as well).
ENVIRONMENT_DIRECTORIES = (".tox", ".nox", ".venv", "venv", "node_modules", "site-packages")
IGNORED_PATHSPECS = (
    *(f":(glob)**/{name}" for name in (*ALWAYS, *ALWAYS_PATTERNS)),
    *(f":(glob,exclude)**/{directory}/**" for directory in ENVIRONMENT_DIRECTORIES),
)


def _text(data: bytes | None) -> str:
    return data.decode("utf-8", errors="replace") if data is not None else ""


def _command_words(test_command: str) -> list[str]:
    try:
        words = shlex.split(test_command)
    except ValueError:  # an unbalanced quote: the words as the shell would roughly see them
        words = test_command.split()
    values = [word.partition("=")[2] for word in words if "=" in word]
    # A command that moves first (`cd tests && python3 runtests.py`, as tox's changedir makes it) names its files
    # from there too.
    directories = [words[at + 1] for at, word in enumerate(words[:-1]) if word == "cd"]
    moved = [os.path.join(directory, word) for directory in directories for word in (*words, *values)]
    return [os.path.normpath(word).removeprefix("./") for word in (*words, *values, *moved) if word]


def _plugins(test_command: str, read: ReadFiles, changed: Iterable[str]) -> set[str]:
    """Module names of the pytest plugins named in the command, the top-level configuration or a changed conftest."""
    conftests = [path for path in changed if PurePosixPath(path).name == "conftest.py"]
    texts = [test_command]
    texts += [_text(data) for _, data in read((path, side) for path in {*_ROOT_CONFIG, *conftests} for side in SIDES)]
    names = {name for text in texts for name in _DASH_P.findall(text)}
    for text in texts:
        for declaration in _PYTEST_PLUGINS.findall(text):
            names.update(_MODULE_NAME.findall(declaration))
    return names


def _module(path: str) -> str | None:
    if not path.endswith(".py"):
        return None
    return path.removeprefix("src/").removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _mentioning_pytest(paths: list[str], read: ReadFiles) -> set[str]:
    """The shared configuration files among `paths` that mention pytest on either side of the change."""
    sides: dict[str, list[bytes | None]] = {path: [] for path in paths}
    for (path, _), data in read((path, side) for path in paths for side in SIDES):
        sides[path].append(data)
    # Absent on both sides means larger than the read limit: not known to be harmless.
    return {
        path
        for path, both in sides.items()
        if all(side is None for side in both) or any(b"pytest" in side for side in both if side is not None)
    }


def infrastructure_in(paths: Iterable[str], test_command: str | None, read: ReadFiles) -> list[str]:
    """The paths among `paths` (changed or created by a task) that are test infrastructure for `test_command`.

    `read` gives files' bytes at the base commit ("before") and now ("after"), None where they are absent.
    """
    command = test_command or ""
    words = _command_words(command)
    runner_files = {name for word in words for name in RUNNER_FILES.get(PurePosixPath(word).name, ())}

    def by_name(path: str) -> bool:
        name = PurePosixPath(path).name
        return (
            name in ALWAYS
            or any(fnmatch(name, pattern) for pattern in ALWAYS_PATTERNS)
            or path in runner_files
            or path in words  # a runner script or a configuration file the command names: tests/runtests.py
        )

    paths = sorted(set(paths))
    shared = [path for path in paths if PurePosixPath(path).name in SHARED_CONFIG and not by_name(path)]
    pytest_config = _mentioning_pytest(shared, read) if shared else set()
    found = [path for path in paths if by_name(path) or path in pytest_config]
    modules = {path: module for path in paths if path not in found and (module := _module(path)) is not None}
    if modules:  # plugins cost a few reads: only when a changed module could be one
        plugins = _plugins(command, read, paths)
        found += [path for path, module in modules.items() if any(_within(module, plugin) for plugin in plugins)]
    return sorted(found)


def _within(module: str, plugin: str) -> bool:
    return module == plugin or module.startswith(f"{plugin}.")
