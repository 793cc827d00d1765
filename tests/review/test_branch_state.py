"""A task branch's state in a real repository: present, pushed, merged (fast-forward, cherry-picked, squash-merged
with the branch still there, here or on the remote), deleted, moved outside refactor-agent; and none for a task that
made no commit."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.protocol.records import TaskSummary
from agent.review.branch_state import branch_state, shown
from agent.review.repository import user_repository

from support.repos import copy_of_template, git, make_repo

BRANCH = "refactor-agent/20261201-232754-24b5/1-rename"


def _task_branch(tmp_path: Path) -> tuple[Path, TaskSummary]:
    """A repository whose task branch holds one commit on top of main, as a run leaves it (made once per session,
    copied)."""
    repo = copy_of_template(("branch_state_task_branch",), tmp_path / "repo", _commit_on_a_branch)
    base, commit = git(repo, "rev-parse", "main", BRANCH).split()
    task = TaskSummary(
        index=1,
        task="Rename",
        status="committed",
        verdict="verified",
        reason="",
        branch=BRANCH,
        base_commit=base,
        commit=commit,
    )
    return repo, task


def _commit_on_a_branch(path: Path) -> None:
    repo = make_repo(path)
    git(repo, "checkout", "-q", "-b", BRANCH)
    (repo / "pkg" / "extra.py").write_text("VALUE = 2\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Add pkg.extra")
    git(repo, "checkout", "-q", "main")


def _state(repo: Path, task: TaskSummary) -> str:
    with user_repository(repo) as repository:
        return shown(branch_state(repository, task))


def _push(repo: Path, tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "remote.git")], check=True)
    git(repo, "remote", "add", "origin", str(tmp_path / "remote.git"))
    git(repo, "push", "-q", "origin", BRANCH)


def _delete(repo: Path) -> None:
    git(repo, "branch", "-q", "-D", BRANCH)


def _merge_fast_forward(repo: Path) -> None:
    git(repo, "merge", "-q", "--ff-only", BRANCH)
    _delete(repo)


def _cherry_pick(repo: Path) -> None:
    (repo / "README").write_text("main moved on\n")
    git(repo, "add", "README")
    git(repo, "commit", "-q", "-m", "main moved on")
    git(repo, "cherry-pick", BRANCH)
    _delete(repo)


def _move(repo: Path) -> None:
    git(repo, "branch", "-q", "-f", BRANCH, "main")


def _squash(repo: Path) -> None:
    """A pull request squash-merged under its title: a new commit, the branch left where it was."""
    git(repo, "merge", "--squash", "-q", BRANCH)
    git(repo, "commit", "-q", "-m", "Rename (#7)")


def _squash_on_the_remote(repo: Path, tmp_path: Path) -> None:
    """Squash-merged on the remote and fetched (origin/HEAD, the default branch a night reads), not pulled."""
    _push(repo, tmp_path)
    _squash(repo)
    git(repo, "push", "-q", "origin", "main")
    git(repo, "remote", "set-head", "origin", "main")
    git(repo, "reset", "-q", "--hard", "HEAD~1")


def _check_out(repo: Path) -> None:
    """The task branch checked out to try it: HEAD holds its commit, which merges nothing."""
    git(repo, "checkout", "-q", BRANCH)


CASES = {
    "present": (lambda repo, tmp: None, "present"),
    "pushed": (_push, "pushed"),
    "merged by fast-forward": (lambda repo, tmp: _merge_fast_forward(repo), "merged"),
    "cherry-picked": (lambda repo, tmp: _cherry_pick(repo), "merged"),
    "squash-merged, the branch kept": (lambda repo, tmp: _squash(repo), "merged"),
    "squash-merged on the remote, the branch kept": (_squash_on_the_remote, "merged"),
    "checked out": (lambda repo, tmp: _check_out(repo), "present"),
    "deleted": (lambda repo, tmp: _delete(repo), "deleted"),
    "moved outside": (lambda repo, tmp: _move(repo), "moved outside refactor-agent"),
}


@pytest.mark.parametrize(("change", "expected"), CASES.values(), ids=CASES.keys())
def test_each_state_from_a_real_repository(tmp_path: Path, change: Callable[[Path, Path], None], expected: str) -> None:
    repo, task = _task_branch(tmp_path)
    change(repo, tmp_path)
    assert _state(repo, task) == expected


def test_a_task_without_a_commit_has_no_branch_state(tmp_path: Path) -> None:
    repo, task = _task_branch(tmp_path)
    assert _state(repo, task.model_copy(update={"commit": None, "branch": None})) == "-"


NIGHT_KEY = "nightly/t-0123456789ab"
LATER_NIGHTS = {
    "a later night's rebase": ({"Refactor-Agent-Rebased-Onto": "0" * 40}, "moved by a later night's rebase"),
    "a later night's result": ({}, "replaced by a later night's result"),
}


@pytest.mark.parametrize(("trailers", "expected"), LATER_NIGHTS.values(), ids=LATER_NIGHTS.keys())
def test_a_named_nights_branch_moved_on_by_a_later_night_of_the_same_task(
    tmp_path: Path, trailers: dict[str, str], expected: str
) -> None:
    repo, task = _task_branch(tmp_path)
    git(repo, "checkout", "-q", BRANCH)
    (repo / "pkg" / "extra.py").write_text("VALUE = 3\n")
    lines = "".join(f"\n{name}: {value}" for name, value in {"Refactor-Agent-Task": NIGHT_KEY, **trailers}.items())
    git(repo, "commit", "-q", "-am", f"Later night\n{lines}")
    git(repo, "checkout", "-q", "main")
    assert _state(repo, task.model_copy(update={"key": NIGHT_KEY})) == expected
    # Another task's trailer, or a run that is no named night's, is someone else's move.
    assert _state(repo, task.model_copy(update={"key": "nightly/t-other"})) == "moved outside refactor-agent"
    assert _state(repo, task) == "moved outside refactor-agent"
