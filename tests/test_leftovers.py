"""What a killed run leaves (worktrees, scratch directories) is removed by the next one; branches are kept."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.leftovers import OWNER_RECORD, ScratchOwner, create_run_scratch, sweep_run_scratch

from repos import git, make_repo

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
    monkeypatch.setattr(tempfile, "tempdir", str(root))

    result = CliRunner().invoke(app, ["sandbox", "sweep"])

    assert result.exit_code == 0, result.output
    assert "scratch directories of 1 unfinished run(s)" in result.output
    assert not dead.exists() and listed_worktrees(repo) == [str(repo)]
    git(repo, "branch", "-D", DEAD_BRANCH)
