"""Worktrees on real repositories: the user's checkout is never touched."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from agent.workspace import Workspace, WorkspaceError, open_repository, task_slug

from repos import checkout_fingerprint, make_repo
from repos import git as run_git


def test_refuses_what_is_not_a_repository_with_commits(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="not a git repository"):
        open_repository(tmp_path)
    run_git(tmp_path, "init", "-q")
    with pytest.raises(WorkspaceError, match="no commits yet"):
        open_repository(tmp_path)
    with pytest.raises(WorkspaceError, match="no such directory"):
        open_repository(tmp_path / "missing")


def test_worktree_commit_and_removal_leave_the_checkout_alone(tmp_path: Path) -> None:
    repo_path = make_repo(tmp_path / "repo")
    (repo_path / "pkg/geometry.py").write_text("# uncommitted edit\n")
    (repo_path / "scratch.txt").write_text("untracked\n")
    run_git(repo_path, "stash", "push", "-q", "--", "pkg/geometry.py")
    (repo_path / "pkg/report.py").write_text("# another uncommitted edit\n")
    before = checkout_fingerprint(repo_path)

    workspace = Workspace.create(open_repository(repo_path), run_id="r1", task="Rename things!")
    assert workspace.branch == "refactor-agent/r1/rename-things"
    assert (workspace.path / "pkg/geometry.py").read_text().startswith("def compute_area")
    (workspace.path / "pkg/geometry.py").write_text("def area(w, h):\n    return w * h\n")
    (workspace.path / "pkg/new.py").write_text("NEW = 1\n")
    assert "pkg/new.py" in workspace.diff()
    commit = workspace.commit("Rename compute_area", {"Refactor-Agent-Run": "r1"})
    workspace.remove()

    assert checkout_fingerprint(repo_path) == before
    assert not workspace.path.exists()
    user_repo = git.Repo(repo_path)
    branch_commit = user_repo.commit(workspace.branch)
    assert branch_commit.hexsha == commit
    assert branch_commit.parents[0].hexsha == workspace.base_commit
    assert branch_commit.message.rstrip().endswith("\n\nRefactor-Agent-Run: r1")
    assert sorted(branch_commit.stats.files) == ["pkg/geometry.py", "pkg/new.py"]


def test_commit_without_changes_returns_none(tmp_path: Path) -> None:
    workspace = Workspace.create(open_repository(make_repo(tmp_path / "repo")), run_id="r2", task="noop")
    try:
        assert workspace.diff() == ""
        assert workspace.commit("nothing", {}) is None
    finally:
        workspace.remove()


def test_slug_is_safe_for_branch_names() -> None:
    assert task_slug("Rename `foo()` → bar, everywhere!!") == "rename-foo-bar-everywhere"
    assert task_slug("???") == "task"
    assert len(task_slug("x" * 200)) <= 40


def test_cache_artifacts_are_not_committed_but_tracked_changes_are(tmp_path: Path) -> None:
    workspace = Workspace.create(open_repository(make_repo(tmp_path / "repo")), run_id="r3", task="artifacts")
    try:
        (workspace.path / "pkg/__pycache__").mkdir()
        (workspace.path / "pkg/__pycache__/geometry.cpython-311.pyc").write_bytes(b"\0cache")
        (workspace.path / ".pytest_cache").mkdir()
        (workspace.path / ".pytest_cache/README.md").write_text("cache")
        (workspace.path / "pkg/geometry.py").write_text("def area(w, h):\n    return w * h\n")
        commit = workspace.commit("Rename", {})
        files = sorted(git.Repo(workspace.path).commit(commit).stats.files)
    finally:
        workspace.remove()
    assert files == ["pkg/geometry.py"]
