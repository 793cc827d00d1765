"""A task record rebuilt from git when it is missing or does not parse: every branch of the night whose tip carries
a Refactor-Agent-Task trailer is that task's, waiting for review, with the verdict of its trailer; a branch without
one is not ours. A rebuilt record never forces a rerun by itself: its fingerprints are tonight's."""

from __future__ import annotations

from agent.gate.verdict import VERDICT_TRAILER, read_trailers
from agent.nights.identity import TASK_TRAILER
from agent.protocol.nights import Fingerprint, TaskKey, TaskRecord, TaskRecordFile
from agent.protocol.records import unmarked
from agent.worktree.safe_git import GitError, SafeGit
from agent.worktree.workspace import BRANCH_PREFIX

MAX_MESSAGE_BYTES = 64 * 1024
RUN_TRAILER = "Refactor-Agent-Run"
VERDICTS = ("verified", "unverified", "regressed")


def rebuild(
    git: SafeGit,
    night: str,
    known: dict[TaskKey, TaskRecord],
    *,
    work_tree: str,
    git_dir: str,
    written_by: str,
    tips: dict[str, str] | None = None,
) -> TaskRecordFile:
    """`known`: tonight's tasks as a fresh record would have them (text, kind, branch, fingerprint); a branch of
    the night with a key that is not among them is archived. `tips`: every branch's tip as a listing just read them
    (the plan's), whose night branches are those for-each-ref would list; None: listed here."""
    prefix = f"{BRANCH_PREFIX}{night}/"
    if tips is None:
        listing = git.run("for-each-ref", "--format=%(refname:strip=2) %(objectname)", f"refs/heads/{prefix}")
        rows = [line.partition(" ")[::2] for line in listing.decode("utf-8", errors="replace").splitlines()]
    else:  # a pattern ending in "/" matches the start of a ref's name (no ref name holds a glob's characters)
        rows = [(branch, tip) for branch, tip in tips.items() if branch.startswith(prefix)]
    tasks: dict[TaskKey, TaskRecord] = {}
    for branch, tip in rows:
        try:
            message = git.read_capped("cat-file", "commit", tip, max_bytes=MAX_MESSAGE_BYTES).data
            base = git.run("rev-parse", "--verify", f"{tip}^").decode().strip()
        except GitError:
            continue
        trailers = read_trailers(message.partition(b"\n\n")[2].decode("utf-8", errors="replace"))
        key = trailers.get(TASK_TRAILER)
        if key is None:
            continue
        verdict = unmarked(trailers.get(VERDICT_TRAILER, "unverified"))
        run_id = trailers.get(RUN_TRAILER, "rebuilt")
        fresh = known.get(key)
        tasks[key] = TaskRecord(
            key=key,
            text=fresh.text if fresh else key,
            kind=fresh.kind if fresh else "other",
            branch=branch,
            fingerprint=fresh.fingerprint if fresh else Fingerprint(model="unknown", effort="max"),
            fate="waiting" if fresh else "archived",
            tip=tip,
            base=base,
            status="committed",
            verdict=verdict if verdict in VERDICTS else "unverified",  # type: ignore[arg-type]
            first_run=run_id,
            last_run=run_id,
        )
    return TaskRecordFile(work_tree=work_tree, git_dir=git_dir, tasks=tasks, written_by=written_by)
