"""Earlier results of a night's task, on private refs refs/refactor-agent/history/<night>/<slug>/<run-id>: not tags
(never pushed with --tags, not fetched by clones, not in `git branch`), and they keep a deleted branch's commit
readable for the merged checks."""

from __future__ import annotations

from agent.worktree.safe_git import SafeGit
from agent.worktree.workspace import BRANCH_PREFIX, PRIVATE_REF_PREFIX

HISTORY_PREFIX = f"{PRIVATE_REF_PREFIX}history/"


def history_ref(branch: str, run_id: str, *, unfinished: bool = False) -> str:
    return f"{HISTORY_PREFIX}{branch.removeprefix(BRANCH_PREFIX)}/{run_id}{'-unfinished' if unfinished else ''}"


def history_tips(git: SafeGit, branch: str) -> list[str]:
    """The commits a task's branch was ever published at, oldest first (run ids sort by time)."""
    prefix = f"{HISTORY_PREFIX}{branch.removeprefix(BRANCH_PREFIX)}/"
    listing = git.run("for-each-ref", "--format=%(refname) %(objectname)", prefix).decode("utf-8", errors="replace")
    rows = sorted(line.split(" ", 1) for line in listing.splitlines() if " " in line)
    return [commit for name, commit in rows if not name.endswith("-unfinished")]
