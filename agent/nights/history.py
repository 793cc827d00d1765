"""Earlier results of a night's task, on private refs refs/refactor-agent/history/<night>/<slug>/<run-id>: not tags
(never pushed with --tags, not fetched by clones, not in `git branch`), and they keep a deleted branch's commit
readable for the merged checks. The newest keep_history of each task are kept (`refactor-agent gc`, a night's end),
and always the one its branch is at."""

from __future__ import annotations

from agent.worktree.safe_git import SafeGit
from agent.worktree.workspace import BRANCH_PREFIX, PRIVATE_REF_PREFIX

HISTORY_PREFIX = f"{PRIVATE_REF_PREFIX}history/"


def history_ref(branch: str, run_id: str, *, unfinished: bool = False) -> str:
    return f"{HISTORY_PREFIX}{branch.removeprefix(BRANCH_PREFIX)}/{run_id}{'-unfinished' if unfinished else ''}"


class HistoryTips:
    """The commits each task's branch was ever published at, from one listing of every history ref of the repository
    (made at the first question; a plan asks for each published task while nothing writes them)."""

    def __init__(self, git: SafeGit) -> None:
        self._git = git
        self._rows: list[list[str]] | None = None

    def of(self, branch: str) -> list[str]:
        """Oldest first (run ids sort by time)."""
        prefix = f"{HISTORY_PREFIX}{branch.removeprefix(BRANCH_PREFIX)}/"
        if self._rows is None:
            listing = self._git.run("for-each-ref", "--format=%(refname) %(objectname)", HISTORY_PREFIX)
            lines = listing.decode("utf-8", errors="replace").splitlines()
            self._rows = sorted(line.split(" ", 1) for line in lines if " " in line)
        # What for-each-ref lists for the pattern `prefix`: a pattern ending in "/" matches the start of a ref's name
        # (a character no ref name holds, as "*", matches nothing either way).
        rows = [row for row in self._rows if row[0].startswith(prefix)]
        return [commit for name, commit in rows if not name.endswith("-unfinished")]


def prune(git: SafeGit, keep: int, *, dry_run: bool = False) -> list[str]:
    """Remove each task's history refs beyond its newest `keep` (by run id: they sort by time), never one whose
    commit its branch is at now; the refs removed. One transaction with the expected values: a ref that moved
    meanwhile fails it whole and nothing is removed."""
    branches = f"refs/heads/{BRANCH_PREFIX}".encode()
    # The history refs and our branches in one listing (for-each-ref sorts them by name; each kind keeps its order).
    listing = git.run("for-each-ref", "--format=%(refname) %(objectname)", HISTORY_PREFIX, branches.decode())
    lines = listing.split(b"\n")
    history_lines = b"\n".join(line for line in lines if not line.startswith(branches)).decode("utf-8", "replace")
    by_task: dict[str, list[tuple[str, str]]] = {}
    for name, commit in (line.split(" ", 1) for line in history_lines.splitlines() if " " in line):
        by_task.setdefault(name.rsplit("/", 1)[0], []).append((name, commit))
    tips = b"\n".join(line for line in lines if line.startswith(branches)).decode()
    branch_tips = dict(line.split(" ", 1) for line in tips.splitlines() if " " in line)
    doomed = []
    for task, refs in by_task.items():
        tip = branch_tips.get(f"refs/heads/{BRANCH_PREFIX}{task.removeprefix(HISTORY_PREFIX)}")
        doomed += [(name, commit) for name, commit in sorted(refs)[:-keep] if commit != tip]
    if doomed and not dry_run:
        commands = "".join(f"delete {name} {commit}\n" for name, commit in doomed)
        git.run("update-ref", "--stdin", input=f"start\n{commands}prepare\ncommit\n".encode())
    return [name for name, _ in doomed]
