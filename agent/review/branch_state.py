"""Where a task's branch stands in the user's repository now: still as the run left it, pushed, merged, deleted, or
moved by someone else. Read through SafeGit, never written.

`review RUN --wide` shows it per task, `review RUN` for a named night's stable branches. A task without a commit has
no branch to speak of (None).
"""

from __future__ import annotations

from typing import Literal

from agent.gate.verdict import REBASED_ONTO_TRAILER, read_trailers
from agent.nights.default_branch import DefaultBranch, checked_out_branch, default_branch
from agent.nights.errors import NightError
from agent.nights.identity import TASK_TRAILER
from agent.nights.merged import find_merge
from agent.protocol.records import TaskSummary
from agent.review.repository import UserRepository
from agent.worktree.safe_git import GitError

# rebased and replaced: a night's stable branch moved on by a later run of the same night (issue 22's nights).
BranchState = Literal["present", "pushed", "rebased", "replaced", "merged", "deleted", "outside"]
SHOWN = {
    "outside": "moved outside refactor-agent",
    "rebased": "moved by a later night's rebase",
    "replaced": "replaced by a later night's result",
}


def shown(state: BranchState | None) -> str:
    return "-" if state is None else SHOWN.get(state, state)


def branch_state(repository: UserRepository, task: TaskSummary) -> BranchState | None:
    """merged: the task's commit is in the default branch or the checked-out branch, by the nights' own checks
    (agent/nights/merged.py: an ancestor, its task trailer, the same patch, all of its change), whether or not its
    branch is still there (a squash-merged pull request leaves it); else present: the branch points at the task's
    commit (pushed: and a remote-tracking branch of the same name does too); rebased or replaced: a named night's
    branch that a later night moved (its commit names the same task); outside: it points elsewhere; deleted: gone
    and not merged."""
    if task.branch is None or task.commit is None:
        return None
    tip = repository.tip(task.branch)
    if tip is not None and tip != task.commit:
        return _moved(repository, task, tip)
    if _merged(repository, task.key, task.commit):
        return "merged"
    if tip is None:
        return "deleted"
    return "pushed" if tip in _remote_tips(repository, task.branch) else "present"


def _moved(repository: UserRepository, task: TaskSummary, tip: str) -> BranchState:
    """A later night of the same task leaves its Refactor-Agent-Task trailer on the branch; anyone else does not."""
    if task.key is None:
        return "outside"
    trailers = read_trailers(repository.message(tip))
    if trailers.get(TASK_TRAILER) != task.key:
        return "outside"
    return "rebased" if REBASED_ONTO_TRAILER in trailers else "replaced"


def _remote_tips(repository: UserRepository, branch: str) -> set[str]:
    listing = repository.git.run("for-each-ref", "--format=%(objectname) %(refname)", "refs/remotes")
    tips = set()
    for line in listing.decode("utf-8", errors="replace").splitlines():
        commit, _, ref = line.partition(" ")
        if ref.endswith(f"/{branch}"):
            tips.add(commit)
    return tips


def _merged(repository: UserRepository, key: str | None, commit: str) -> bool:
    """Looked for where a night looks (the default branch: a remote's HEAD as last fetched, else the checked-out
    branch) and in the checked-out branch (merged here, not pushed yet); never in a branch of refactor-agent's (one
    checked out to try it holds its commit). A check git cannot answer, or a commit it no longer has, is not
    merged as far as anyone can tell."""
    targets: dict[str, DefaultBranch] = {}
    for read in (default_branch, checked_out_branch):
        try:
            target = read(repository.git)
        except (NightError, GitError):
            continue
        targets.setdefault(target.commit, target)
    for target in targets.values():
        try:
            if find_merge(repository.git, key, [commit], target) is not None:
                return True
        except GitError:
            continue
    return False
