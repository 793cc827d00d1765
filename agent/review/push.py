"""`review push`: one task's branch to a remote under the same name. A named night's stable branch is replaced each
night by its base plus one commit, never a fast-forward of what was pushed before, so it goes with
`--force-with-lease` on the tip refactor-agent last pushed to that remote (the task record's `pushed`; none recorded:
the remote's branch as last fetched when it is this task's commit, else the remote must not have it): a replaced
branch updates the remote, a remote branch someone else moved is refused, and the push is recorded. A one-off run's
branch is pushed plainly (git refuses anything but a fast-forward)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agent.gate.verdict import read_trailers
from agent.nights.identity import TASK_TRAILER
from agent.nights.plan import record_store
from agent.protocol.nights import PushRecord, TaskRecordFile
from agent.protocol.records import now_iso
from agent.review.records import ReviewError, TaskRef
from agent.review.repository import Lease, StaleLease, UserRepository
from agent.worktree.safe_git import GitError
from agent.worktree.workspace import WorkspaceError

WRITTEN_BY = "review push"


def _ours_as_last_fetched(repository: UserRepository, remote: str, branch: str, key: str) -> str | None:
    """With no push recorded (a record rebuilt from git keeps none): the remote's branch as git last saw it, when
    that is a commit of this task (its Refactor-Agent-Task trailer), which refactor-agent made and pushed; the
    lease still fails if the remote moved since."""
    try:
        seen = repository.git.run("rev-parse", "--verify", "-q", f"refs/remotes/{remote}/{branch}^{{commit}}")
        commit = seen.decode().strip()
        trailers = read_trailers(repository.message(commit))
    except GitError:
        return None
    return commit if trailers.get(TASK_TRAILER) == key else None


@dataclass(frozen=True)
class Pushed:
    branch: str
    remote: str
    commit: str
    replaced: str | None = None  # the remote's earlier tip that refactor-agent pushed, when this one replaced it


def push_task(
    ref: TaskRef, repository: UserRepository, remote: str, runs_dir: Path, log: Callable[[str], None]
) -> Pushed:
    task = ref.task
    branch = task.branch
    commit = repository.tip(branch) if branch else None
    if branch is None or commit is None or task.commit is None:
        raise ReviewError(f"task {ref.run.run_id}/{task.index} has no commit to push ({task.verdict})")
    if task.key is None or task.published != branch:
        repository.push(remote, branch)
        return Pushed(branch, remote, commit)
    night = task.key.partition("/")[0]
    store = record_store(runs_dir, repository.repo, repository.git, night, {}, WRITTEN_BY, log)
    known = store.load().tasks.get(task.key)
    last = known.pushed.get(remote) if known is not None else None
    expected = last.commit if last is not None else _ours_as_last_fetched(repository, remote, branch, task.key)
    try:
        repository.push(remote, branch, Lease(expected))
    except StaleLease:
        where = (
            f"is not at {expected[:12]}, where refactor-agent last pushed it"
            if expected is not None
            else "exists there, and refactor-agent never pushed it"
        )
        raise WorkspaceError(
            f"not pushed: {remote}'s {branch} {where}: someone else moved it (git fetch {remote} and look)"
        ) from None

    def pushed(record: TaskRecordFile) -> None:
        if (recorded := record.tasks.get(task.key or "")) is not None:
            recorded.pushed[remote] = PushRecord(commit=commit, at=now_iso())

    store.update(pushed)
    return Pushed(branch, remote, commit, expected if expected != commit else None)
