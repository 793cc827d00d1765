"""refactor-agent as a user installs it: a wheel built from the source tree, carried in a bundle, and installed
from the bundle alone into a fresh virtual environment, in a network namespace with no network. One of each per
test session, shared: a test that needs the installed tool takes these fixtures instead of paying for another
fresh-environment install in CI.

- `built_wheel`: the .whl, built by the bundle's own builder (`pip wheel --no-deps`, setuptools from pip's cache or
  the index) from a copy of what packaging reads, so that neither a stale build/ folder nor the editable install
  of the tests' own environment can put into it what the project's packaging would leave out. Its build starts as
  collection ends (support/early.py): pip's processes take the second core while the tests before it run.
- `bundle`: `refactor-agent bundle` of that same wheel (no second build), carrying the sandbox image under a tag
  of the session's own: the tag is removed once saved, so the bundle's install.sh must really `docker load` it
  back (the shared `refactor-agent-sandbox:latest` is never touched; the layers stay, it has them).
- `offline_install`: the bundle's install.sh run in a loopback-only network namespace (namespaces.py), with what
  it printed and what the namespace's network looked like.
- `installed_wheel`: that install, a new virtual environment without system site-packages holding the wheel and
  its dependencies from the bundle's wheels alone. `InstalledWheel.environment()` is the environment for its
  commands: its bin folder first on PATH, no PYTHONPATH, so that nothing of the source tree can be imported. Run
  them with a working directory outside the source tree too (`python -m` would import from the current directory).

`rename_task` and `assert_verified_rename` are the task every installed tool runs: a scripted server renames
`compute_area` in the sample repository, and the branch must be committed and verified.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import git
import pytest

from agent.bundle.make import project_wheel
from sandbox.models import DEFAULT_IMAGE

from support.early import BACKGROUND, started_early
from support.namespaces import in_loopback_namespace
from support.scripted_server import Reply, ScriptedServer
from support.user_cache import USER_CACHE

SOURCE_ROOT = Path(__file__).resolve().parents[2]
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


def _pip(*arguments: str | Path, environment: dict[str, str]) -> None:
    words = [str(argument) for argument in arguments]
    done = subprocess.run(
        [*BACKGROUND, sys.executable, "-m", "pip", "--disable-pip-version-check", *words],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
        check=False,
        env=environment,
    )
    assert done.returncode == 0, f"pip {' '.join(words)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@started_early
def built_wheel() -> Callable[[], Path]:
    """project_wheel in a thread of its own, started once it has copied the source tree and started pip, so that
    nothing the tests change later (the environment, tempfile's folder) reaches the build."""
    environment = dict(os.environ)
    folder = Path(tempfile.mkdtemp(prefix="refactor-agent-wheel-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    started = threading.Event()

    def pip(*arguments: str | Path) -> None:
        started.set()
        _pip(*arguments, environment=environment)

    def build() -> Path:
        try:
            return project_wheel(SOURCE_ROOT, folder / "dist", pip)
        finally:
            started.set()  # a copy that failed has nothing to wait for

    executor = ThreadPoolExecutor(1, thread_name_prefix="wheel-build")
    wheel = executor.submit(build)
    executor.shutdown(wait=False)  # its thread ends with the build
    started.wait()
    return wheel.result


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


@dataclass(frozen=True)
class Bundle:
    directory: Path
    image: str  # the image it carries, under the session's own tag (removed: install.sh loads it back)


@pytest.fixture(scope="session")
def bundle(built_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bundle]:
    client = docker.from_env()
    tag = f"refactor-agent-bundle-test:{secrets.token_hex(4)}"
    client.images.get(DEFAULT_IMAGE).tag(tag)
    directory = tmp_path_factory.mktemp("bundle") / "bundle"
    try:
        # The llama-server wheel is found where scripts/setup-llama.sh built it: the user's cache, not the session's.
        done = subprocess.run(
            [sys.executable, "-m", "agent", "bundle", directory, "--wheel", built_wheel, "--image", tag],
            cwd=SOURCE_ROOT, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False,
            env={**os.environ, "XDG_CACHE_HOME": str(USER_CACHE)},
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        client.images.remove(tag)  # only the tag: the sandbox image keeps the layers
        yield Bundle(directory=directory, image=tag)
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(tag)


def install_from(bundle: Path, venv: Path, **environment: str) -> subprocess.CompletedProcess:
    """`bash BUNDLE/install.sh VENV`, with this machine's python3 and whatever pip configuration it has."""
    return subprocess.run(
        ["bash", str(bundle / "install.sh"), str(venv)],
        capture_output=True, text=True, timeout=PIP_TIMEOUT_S, env={**os.environ, **environment}, check=False,
    )  # fmt: skip


@dataclass(frozen=True)
class OfflineInstall:
    """The bundle's install.sh as it ran in a network namespace with no network but loopback."""

    venv: Path
    interfaces: list[str]  # what the namespace had
    outside: str  # what a connection out of it met
    returncode: int
    stdout: str
    stderr: str

    @classmethod
    def from_scenario(cls, found: dict[str, Any]) -> OfflineInstall:
        return cls(**{**found, "venv": Path(found["venv"])})


def _install_offline(tmp: str, bundle: str) -> dict[str, Any]:
    """Run in the namespace (namespaces.py): what the network looks like there, then the install."""
    try:
        socket.create_connection(("192.0.2.1", 443), timeout=5)  # TEST-NET-1: no DNS needed, nothing real there
        outside = "reached"
    except OSError as error:
        outside = f"unreachable: {error}"
    done = install_from(Path(bundle), Path(tmp) / "venv")
    return {
        "venv": str(Path(tmp) / "venv"),
        "interfaces": sorted(name for _, name in socket.if_nameindex()),
        "outside": outside,
        "returncode": done.returncode,
        "stdout": done.stdout,
        "stderr": done.stderr,
    }


@pytest.fixture(scope="session")
def offline_install(bundle: Bundle, tmp_path_factory: pytest.TempPathFactory) -> OfflineInstall:
    found = in_loopback_namespace(_install_offline, tmp_path_factory.mktemp("installed"), str(bundle.directory))
    return OfflineInstall.from_scenario(found)


@pytest.fixture(scope="session")
def installed_wheel(built_wheel: Path, offline_install: OfflineInstall) -> InstalledWheel:
    """The wheel as the bundle installs it: with its dependencies from the bundle's wheels alone, into a new
    virtual environment without system site-packages."""
    assert offline_install.returncode == 0, offline_install.stdout + offline_install.stderr
    return InstalledWheel(wheel=built_wheel, venv=offline_install.venv)


def rename_task(
    command: Path, repo: Path, cwd: Path, environment: dict[str, str], *options: str
) -> subprocess.CompletedProcess:
    """`command run REPO` renaming compute_area, against a scripted server (started here, so in this process's
    network namespace)."""
    rename = "sed -i 's/compute_area/area/g' pkg/geometry.py pkg/report.py tests/test_geometry.py"
    script = [
        Reply(tool_calls=[("bash", {"command": rename})]),
        Reply(tool_calls=[("run_tests", {})]),
        Reply(tool_calls=[("finish", {"summary": "Rename compute_area to area"})]),
    ]
    with ScriptedServer(script) as server:
        return subprocess.run(
            [
                command, "run", str(repo), "--task", "Rename compute_area to area", "--server", server.url,
                "--runs-dir", str(cwd / "runs"), *options,
            ],
            cwd=cwd, env=environment, capture_output=True, text=True, timeout=600,
        )  # fmt: skip


def assert_verified_rename(repo: Path) -> None:
    (branch,) = [head for head in git.Repo(repo).heads if head.name.startswith("refactor-agent/")]
    changed = sorted(branch.commit.stats.files)
    assert changed == ["pkg/geometry.py", "pkg/report.py", "tests/test_geometry.py"]
    assert "Refactor-Agent-Verdict: verified" in branch.commit.message
