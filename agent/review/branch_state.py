"""Where a task's branch stands in the user's repository now: still as the run left it, pushed, merged, deleted, or
moved by someone else. Read through SafeGit, never written.

`review RUN --wide` shows it per task, `review RUN` for a named night's stable branches. A task without a commit has
no branch to speak of (None).
"""

from __future__ import annotations

from typing import Literal

from agent.gate.verdict import REBASED_ONTO_TRAILER, read_trailers
from agent.nights.identity import TASK_TRAILER
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
    """present: the branch points at the task's commit (pushed: and a remote-tracking branch of the same name does
    too); rebased or replaced: a named night's branch that a later night moved (its commit names the same task);
    outside: it points elsewhere; merged: it is gone and the commit, or its patch, is on the checked-out branch;
    deleted: gone otherwise."""
    if task.branch is None or task.commit is None:
        return None
    tip = repository.tip(task.branch)
    if tip is not None:
        if tip != task.commit:
            return _moved(repository, task, tip)
        return "pushed" if tip in _remote_tips(repository, task.branch) else "present"
    return "merged" if _merged(repository, task.commit) else "deleted"


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


def _merged(repository: UserRepository, commit: str) -> bool:
    """The commit is an ancestor of HEAD (merged, fast-forwarded), or `git cherry` finds its patch there (cherry-
    picked, rebased, squashed alone). A commit git no longer has is not merged as far as anyone can tell."""
    try:
        repository.git.run("cat-file", "-e", f"{commit}^{{commit}}")
    except GitError:
        return False
    try:
        repository.git.run("merge-base", "--is-ancestor", commit, "HEAD")
        return True
    except GitError:
        pass
    try:
        cherry = repository.git.run("cherry", "HEAD", commit, f"{commit}^")
    except GitError:
        return False
    return cherry.decode().startswith("-")
