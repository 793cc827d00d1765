"""The default branch a night's tasks start from and are checked against: a remote's HEAD as last fetched (origin
first, then the other remotes in order), else the checked-out branch. Never fetched: the plan says so."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agent.nights.errors import NightError
from agent.worktree.leftovers import written_branch
from agent.worktree.safe_git import GitError, SafeGit
from agent.worktree.workspace import BRANCH_PREFIX


@dataclass(frozen=True)
class DefaultBranch:
    name: str  # "origin/main", "main"
    ref: str  # "refs/remotes/origin/main", "refs/heads/main"
    commit: str
    source: Literal["remote HEAD", "checked out"]


def _symbolic(git: SafeGit, ref: str) -> str | None:
    """The ref `ref` names, None when it is no symbolic ref. HEAD's file holding what git writes for a plain branch
    name answers without a git process (the user's git dir, not a worktree's); any other file is git's to read."""
    if ref == "HEAD" and (branch := written_branch(git.git_dir / "HEAD")) is not None:
        return branch
    try:
        return git.run("symbolic-ref", "-q", ref).decode("utf-8", errors="replace").strip() or None
    except GitError:
        return None


def _commit(git: SafeGit, ref: str, commits: dict[str, str]) -> str:
    """The commit `ref` is at: from `commits` (refs whose object is a commit, as a listing found them), else git's."""
    if ref in commits:
        return commits[ref]
    return git.run("rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}").decode().strip()


def default_branch(git: SafeGit, commits: dict[str, str] | None = None) -> DefaultBranch:
    """`commits`: refs known to point at a commit (full name -> id), read just before (the plan's branch listing)."""
    remotes = git.run("remote").decode("utf-8", errors="replace").split()
    for remote in sorted(remotes, key=lambda name: name != "origin"):  # origin first, the others in git's order
        target = _symbolic(git, f"refs/remotes/{remote}/HEAD")
        if target is not None and target.startswith("refs/remotes/"):
            try:
                commit = _commit(git, target, commits or {})
                return DefaultBranch(target.removeprefix("refs/remotes/"), target, commit, "remote HEAD")
            except GitError:
                continue  # a remote HEAD naming a branch that was never fetched
    return checked_out_branch(git, commits or {})


def checked_out_branch(git: SafeGit, commits: dict[str, str] | None = None) -> DefaultBranch:
    """The checked-out branch as a default branch: never a detached HEAD, an unborn branch or one of
    refactor-agent's (NightError saying which)."""
    head = _symbolic(git, "HEAD")
    if head is None or not head.startswith("refs/heads/"):
        raise NightError(
            "no default branch: HEAD is detached and there is no <remote>/HEAD "
            "(git remote set-head origin -a, or check out your main branch)"
        )
    name = head.removeprefix("refs/heads/")
    if name.startswith(BRANCH_PREFIX):
        raise NightError(f"no default branch: the checked-out branch {name} is refactor-agent's: check out yours")
    try:
        return DefaultBranch(name, head, _commit(git, head, commits or {}), "checked out")
    except GitError:
        raise NightError(f"no default branch: {name} has no commits yet") from None
