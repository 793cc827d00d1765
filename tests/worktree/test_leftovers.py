"""What a killed run leaves (worktrees, scratch directories) is removed by the next one; branches are kept."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.worktree.leftovers import (
    BUILD_SCRATCH_PREFIX,
    HOOKS_SCRATCH_PREFIX,
    OWNER_RECORD,
    ScratchOwner,
    create_run_scratch,
    sweep_all_scratch,
    sweep_run_scratch,
)
from sandbox import DEFAULT_IMAGE, docker_client
from sandbox.container import sweep_leftovers

from support.repos import git, make_repo

DEAD_BRANCH = "refactor-agent/dead/1-task"


def worktree_in(scratch: Path, repo: Path, branch: str) -> Path:
    path = scratch / "1-task" / "worktree"
    git(repo, "worktree", "add", "--quiet", "-b", branch, str(path))
    return path


def listed_worktrees(repo: Path) -> list[str]:
    lines = git(repo, "worktree", "list", "--porcelain").splitlines()
    return [line.split(" ", 1)[1] for line in lines if line.startswith("worktree ")]


def killed_run(repo: Path, root: Path) -> Path:
    """The scratch directory of a run killed with -9 after it committed once."""
    dead = create_run_scratch("dead", repo / ".git", root=root)
    tree = worktree_in(dead, repo, DEAD_BRANCH)
    (tree / "new.py").write_text("x = 1\n")
    git(tree, "add", "new.py")
    git(tree, "commit", "-q", "-m", "work of the night")
    # The process that wrote this record has ended: same host and pid, another start time.
    gone = ScratchOwner(owner=f"{socket.gethostname()}:{os.getpid()}:0", run_id="dead", git_dir=repo / ".git")
    (dead / OWNER_RECORD).write_text(gone.model_dump_json())
    return dead


def killed_hooks_folder(root: Path) -> Path:
    """The empty hooks folder a command killed with -9 held (named as such, not as an environment build's)."""
    folder = Path(tempfile.mkdtemp(prefix=HOOKS_SCRATCH_PREFIX, dir=root))
    gone = ScratchOwner(owner=f"{socket.gethostname()}:{os.getpid()}:0")
    (folder / OWNER_RECORD).write_text(gone.model_dump_json())
    return folder


def test_a_killed_commands_hooks_folder_is_swept_under_its_own_name_not_as_an_environment_build(
    tmp_path: Path,
) -> None:
    root = tmp_path / "scratch"
    root.mkdir()
    hooks = killed_hooks_folder(root)
    assert sweep_run_scratch(root=root, prefix=BUILD_SCRATCH_PREFIX) == 0
    assert sweep_run_scratch(root=root, prefix=HOOKS_SCRATCH_PREFIX) == 1
    assert not hooks.exists()


def test_one_sweep_of_every_kind_counts_runs_and_builds_and_removes_the_hooks_folders_too(tmp_path: Path) -> None:
    """The run's start and `sandbox sweep` both sweep this way: the runs' and builds' leftovers are counted apart
    (each is a line to the user), the hooks folders go uncounted; a live owner's scratch stays."""
    repo = make_repo(tmp_path / "repo")
    root = tmp_path / "scratch"
    root.mkdir()
    dead = killed_run(repo, root)
    hooks = killed_hooks_folder(root)
    builds = [Path(tempfile.mkdtemp(prefix=BUILD_SCRATCH_PREFIX, dir=root)) for _ in range(2)]
    gone = ScratchOwner(owner=f"{socket.gethostname()}:{os.getpid()}:0")
    for build in builds:
        (build / OWNER_RECORD).write_text(gone.model_dump_json())
    alive = create_run_scratch("alive", repo / ".git", root=root)

    assert sweep_all_scratch(root=root) == (1, 2)

    assert not dead.exists() and not hooks.exists() and not any(build.exists() for build in builds)
    assert alive.is_dir()
    assert sweep_all_scratch(root=root) == (0, 0)


def test_the_sweep_removes_runs_whose_process_is_gone_and_keeps_their_branches(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    root = tmp_path / "scratch"
    root.mkdir()
    dead = killed_run(repo, root)
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    (dead / "1-task" / "worktree" / "link").symlink_to(precious)  # a model-made symlink is not followed
    alive = create_run_scratch("alive", repo / ".git", root=root)
    alive_tree = worktree_in(alive, repo, "refactor-agent/alive/1-task")
    (root / "refactor-agent-run-planted").symlink_to(dead)  # a symlink named like ours is not our directory
    # The user's own worktree on a disk that is not mounted right now: `git worktree prune` would forget it.
    unmounted = tmp_path / "usb" / "feature"
    git(repo, "worktree", "add", "--quiet", "-b", "feature", str(unmounted))
    (tmp_path / "usb").rename(tmp_path / "usb-unmounted")

    assert sweep_run_scratch(root=root) == 1

    assert not dead.exists() and alive_tree.is_dir() and precious.read_text() == "keep me\n"
    assert listed_worktrees(repo) == [str(repo), str(alive_tree), str(unmounted)]
    assert git(repo, "log", "--format=%s", f"main..{DEAD_BRANCH}").strip() == "work of the night"
    git(repo, "branch", "-D", DEAD_BRANCH)  # no worktree pins it any more


@pytest.mark.docker
def test_sandbox_sweep_removes_the_worktrees_of_killed_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path / "repo")
    root = tmp_path / "scratch"
    root.mkdir()
    dead = killed_run(repo, root)
    hooks = killed_hooks_folder(root)
    monkeypatch.setattr(tempfile, "tempdir", str(root))

    result = CliRunner().invoke(app, ["sandbox", "sweep"])

    assert result.exit_code == 0, result.output
    assert "scratch directories of 1 unfinished run" in result.output
    assert "scratch directories of 0 unfinished environment builds" in result.output  # a hooks folder is none
    assert not dead.exists() and not hooks.exists() and listed_worktrees(repo) == [str(repo)]
    git(repo, "branch", "-D", DEAD_BRANCH)


BUILD_UNTIL_KILLED = """
import sys
from pathlib import Path
import git
from agent.environment.stage import prepare_environment
from sandbox import DEFAULT_IMAGE, docker_client
prepare_environment(git.Repo(sys.argv[1]), client=docker_client(), sandbox_image=DEFAULT_IMAGE, image_explicit=False,
                    spec=None, test_command=None, log_path=Path(sys.argv[2]), progress=print)
"""


@pytest.mark.docker
def test_a_build_killed_with_sigkill_leaves_scratch_that_the_next_sweep_removes(tmp_path: Path) -> None:
    """Issue 18: after kill -9 the build's scratch directories (the committed tree, the build's tools) were never
    swept. Its build containers carry the owner label and go with the same sweep."""
    root = tmp_path / "tmp"
    root.mkdir()
    dockerfile = f"FROM {DEFAULT_IMAGE}\nRUN echo step-under-way && sleep 600\n"
    files = {
        ".devcontainer/devcontainer.json": '{"build": {"dockerfile": "Dockerfile"}}',
        ".devcontainer/Dockerfile": dockerfile,
    }
    repo = make_repo(tmp_path / "killed-build", files)
    log = tmp_path / "build.log"
    environment = {**os.environ, "TMPDIR": str(root), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    environment.pop("PIP_FIND_LINKS", None)
    environment["PIP_CONFIG_FILE"] = os.devnull  # a remote index: the RUN steps get the forwarder's container
    build = subprocess.Popen(
        [sys.executable, "-c", BUILD_UNTIL_KILLED, str(repo), str(log)],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "stderr").open("wb"),
    )
    try:
        for _ in range(600):
            if log.exists() and "\nstep-under-way" in log.read_text():
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"the build never reached its RUN step: {(tmp_path / 'stderr').read_text()}")
    finally:
        build.send_signal(signal.SIGKILL)
        build.wait()
    (scratch,) = root.glob(f"{BUILD_SCRATCH_PREFIX}*")
    assert (scratch / "tree" / ".devcontainer" / "Dockerfile").is_file()
    assert sweep_run_scratch(root=root, prefix=BUILD_SCRATCH_PREFIX) == 1
    assert not scratch.exists()
    client = docker_client()
    assert sweep_leftovers(client) >= 1, "the forwarder's container of the killed build"
    owners = [container.labels.get("refactor-agent.owner", "") for container in client.containers.list(all=True)]
    assert not [owner for owner in owners if owner.startswith(f"{socket.gethostname()}:{build.pid}:")]
