"""refactor-agent as a user installs it: a wheel built from the source tree, installed into a fresh virtual
environment. One of each per test session, shared: a test that needs the installed tool (the wheel test, an
offline bundle later) takes these fixtures instead of paying for another fresh-environment install in CI.

- `built_wheel`: the .whl, built by pip (`pip wheel --no-deps`, setuptools from pip's cache or the index) from a
  copy of the files git tracks or would track, so that neither a stale build/ folder nor the editable install of
  the tests' own environment can put into it what the project's packaging would leave out.
- `installed_wheel`: that wheel installed with its dependencies into a new virtual environment without system
  site-packages (`python -m venv --without-pip`, then this environment's pip with `--python`; dependencies come
  from pip's cache or the configured index). `InstalledWheel.environment()` is the environment for its commands:
  its bin folder first on PATH, no PYTHONPATH, so that nothing of the source tree can be imported. Run them with
  a working directory outside the source tree too (`python -m` would import from the current directory).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SOURCE_ROOT = Path(__file__).resolve().parents[1]
PIP_TIMEOUT_S = 900  # a cold pip cache downloads the dependencies (numpy, tree-sitter's grammars, uv)


def source_files() -> list[str]:
    """The source tree as git sees it: tracked files and new ones not ignored (no .venv, build/, runs/)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=SOURCE_ROOT,
        capture_output=True,
        check=True,
    )
    return [name for name in listed.stdout.decode().split("\0") if name and (SOURCE_ROOT / name).is_file()]


def _pip(*arguments: str, cwd: Path | None = None) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *arguments],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"pip {' '.join(arguments)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@dataclass(frozen=True)
class InstalledWheel:
    wheel: Path
    venv: Path

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    @property
    def command(self) -> Path:
        """The installed `refactor-agent`."""
        return self.bin / "refactor-agent"

    def environment(self, **extra: str) -> dict[str, str]:
        hidden = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
        environment = {name: value for name, value in os.environ.items() if name not in hidden}
        return {**environment, "PATH": f"{self.bin}{os.pathsep}{environment.get('PATH', '')}", **extra}


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    scratch = tmp_path_factory.mktemp("wheel")
    source = scratch / "source"
    for name in source_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(SOURCE_ROOT / name, source / name)
    _pip("wheel", "--no-deps", "--wheel-dir", str(scratch / "dist"), str(source), cwd=scratch)
    (wheel,) = (scratch / "dist").glob("*.whl")
    return wheel


@pytest.fixture(scope="session")
def installed_wheel(built_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> InstalledWheel:
    venv = tmp_path_factory.mktemp("installed") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    _pip("--python", str(venv / "bin" / "python"), "install", "--quiet", str(built_wheel))
    return InstalledWheel(wheel=built_wheel, venv=venv)
