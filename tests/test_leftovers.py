"""What a killed run leaves (worktrees, scratch directories) is removed by the next one; branches are kept."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from agent.leftovers import OWNER_RECORD, ScratchOwner, create_run_scratch, sweep_run_scratch

from repos import git, make_repo


def worktree_in(scratch: Path, repo: Path, branch: str) -> Path:
    path = scratch / "1-task" / "worktree"
    git(repo, "worktree", "add", "--quiet", "-b", branch, str(path))
    return path


def test_the_sweep_removes_runs_whose_process_is_gone_and_keeps_their_branches(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    git_dir = repo / ".git"
    root = tmp_path / "scratch"
    root.mkdir()
    dead = create_run_scratch("dead", git_dir, root=root)
    dead_tree = worktree_in(dead, repo, "refactor-agent/dead/1-task")
    (dead_tree / "new.py").write_text("x = 1\n")
    git(dead_tree, "add", "new.py")
    git(dead_tree, "commit", "-q", "-m", "work of the night")
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    (dead_tree / "link").symlink_to(precious)  # a model-made symlink out of the worktree is not followed
    # The process that wrote this record has ended: same host and pid, another start time.
    gone = ScratchOwner(owner=f"{socket.gethostname()}:{os.getpid()}:0", run_id="dead", git_dir=git_dir)
    (dead / OWNER_RECORD).write_text(gone.model_dump_json())
    alive = create_run_scratch("alive", git_dir, root=root)
    alive_tree = worktree_in(alive, repo, "refactor-agent/alive/1-task")
    planted = root / "refactor-agent-run-planted"
    planted.symlink_to(dead)  # a symlink named like ours is not our directory

    assert sweep_run_scratch(root=root) == 1

    assert not dead.exists() and alive_tree.is_dir() and precious.read_text() == "keep me\n"
    listed = [
        line.split(" ", 1)[1]
        for line in git(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]
    assert listed == [str(repo), str(alive_tree)]
    assert git(repo, "log", "--format=%s", "main..refactor-agent/dead/1-task").strip() == "work of the night"
    git(repo, "branch", "-D", "refactor-agent/dead/1-task")  # no worktree pins it any more
