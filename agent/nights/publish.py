"""Every ref move of a night task: one `git update-ref --stdin` transaction (all or nothing, each ref at the value
expected) that moves the stable branch, writes its history ref and deletes the work branch, with the move written
to the record's `pending` before it and settled after it, so a kill -9 at any instant leaves branch and record
reconcilable (agent/nights/record.py settles it at the next load)."""

from __future__ import annotations

from collections.abc import Callable

from agent.nights.record import RecordStore
from agent.protocol.nights import PendingMove, TaskRecordFile
from agent.worktree.safe_git import GitError, SafeGit

ZERO = "0" * 40


def branch_tip(git: SafeGit, branch: str) -> str | None:
    try:
        return git.run("rev-parse", "--verify", "-q", f"refs/heads/{branch}").decode().strip() or None
    except GitError:
        return None


def checked_out(git: SafeGit) -> dict[str, str]:
    """Branch -> the worktree that has it checked out (the user's checkout or any worktree): never moved."""
    listing = git.run("worktree", "list", "--porcelain").decode("utf-8", errors="replace")
    found, path = {}, ""
    for line in listing.splitlines():
        if line.startswith("worktree "):
            path = line.removeprefix("worktree ")
        elif line.startswith("branch refs/heads/"):
            found[line.removeprefix("branch refs/heads/")] = path
    return found


def _transaction(move: PendingMove) -> bytes:
    stable = f"refs/heads/{move.branch}"
    lines = ["start"]
    if move.new is not None:
        lines.append(f"update {stable} {move.new} {move.old or ZERO}")
    elif move.old is not None:
        lines.append(f"delete {stable} {move.old}")
    if move.history_ref is not None and move.new is not None:
        lines.append(f"update {move.history_ref} {move.new} {ZERO}")
    if move.work_branch is not None:
        lines.append(f"delete refs/heads/{move.work_branch}")
    return ("\n".join([*lines, "prepare", "commit"]) + "\n").encode()


def move_branch(
    store: RecordStore,
    git: SafeGit,
    move: PendingMove,
    *,
    checked_out: dict[str, str],
    done: Callable[[TaskRecordFile, bool], None],
) -> bool:
    """The move, then `done(record, moved)` under the record's lock; moved False: nothing moved (the branch was
    checked out, or not at `old` any more: someone else moved it)."""
    if move.branch in checked_out:
        store.update(lambda record: done(record, False))
        return False
    store.update(lambda record: record.pending.append(move))
    try:
        git.run("update-ref", "--stdin", input=_transaction(move))
        moved = True
    except GitError:
        moved = False

    def settle(record: TaskRecordFile) -> None:
        record.pending = [each for each in record.pending if each != move]
        done(record, moved)

    store.update(settle, made=move if moved else None)
    return moved
