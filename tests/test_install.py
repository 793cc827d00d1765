"""The wheel is the tool: every module and data file of the source tree is in it, and refactor-agent installed
from it alone (a fresh virtual environment, nothing of the source tree importable) runs a task to a committed
branch. The fixtures are tests/support/install_fixtures.py's, built once per session."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from support.install_fixtures import InstalledWheel, assert_verified_rename, rename_task, source_files
from support.repos import make_repo

PACKAGES = ("agent", "tools", "sandbox", "prompts")
# Read at run time with importlib.resources, next to the modules.
DATA_SUFFIXES = (".md", ".scm")
DATA_FILES = ("sandbox/Dockerfile", "agent/bundle/install.sh")


@pytest.mark.wheel
def test_the_wheel_holds_every_module_and_data_file_of_the_source_tree(built_wheel: Path) -> None:
    listed = set(zipfile.ZipFile(built_wheel).namelist())
    in_packages = [name for name in source_files() if name.split("/", 1)[0] in PACKAGES]
    wanted = {name for name in in_packages if name.endswith((".py", *DATA_SUFFIXES))} - {"sandbox/README.md"}
    wanted |= set(DATA_FILES)
    assert wanted - listed == set()
    packages = {name.rsplit("/", 1)[0] for name in wanted if name.endswith("/__init__.py")}
    # The check sees every package:
    assert {"agent/run/stages", "agent/packing", "agent/server", "agent/bundle"} <= packages


@pytest.mark.docker
def test_the_installed_wheel_runs_a_task_to_a_committed_branch(installed_wheel: InstalledWheel, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    environment = installed_wheel.environment(TMPDIR=str(tmp_path), XDG_STATE_HOME=str(tmp_path / "state"))
    where = subprocess.run(
        [installed_wheel.bin / "python", "-c", "import agent; print(agent.__file__)"],
        cwd=tmp_path, env=environment, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert where.stdout.startswith(str(installed_wheel.venv))  # not the source tree's
    done = rename_task(installed_wheel.command, repo, tmp_path, environment)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_verified_rename(repo)
