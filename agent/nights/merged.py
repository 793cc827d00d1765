"""Whether a task's branch is in the default branch, by what each check can see (README "Night after night"):
an ancestor (fast-forward, merge commit), its Refactor-Agent-Task trailer in the default branch's log (a squash or
rebase that kept the message), the same patch (`git cherry`: a rebase-merge, a one-commit squash whose message was
replaced), or the default branch holding all of its change (`merge-tree`: a squash of several commits). A squash
whose lines were edited in review is none of these. Nothing is fetched: the default branch as last fetched."""

from __future__ import annotations

from agent.nights.decide import Merge
from agent.nights.default_branch import DefaultBranch
from agent.nights.identity import TASK_TRAILER
from agent.protocol.nights import TaskKey
from agent.worktree.safe_git import SafeGit

# The log a trailer is looked for in: bounded (a busy default branch gains thousands of commits a month).
MAX_LOG_BYTES = 16 * 1024**2
# A patch-id or merge of a huge change onto a far-moved base must not hold the night's start for long.
CHECK_TIMEOUT_S = 120.0


def _rev(git: SafeGit, *args: str) -> str:
    return git.run(*args).decode().strip()


def _merge_base(git: SafeGit, tip: str, onto: str) -> str | None:
    """The best common ancestor of `tip` and `onto`; None when they have none."""
    code, output = git.run_status("merge-base", tip, onto, allowed=(0, 1))
    return output.decode().strip() if code == 0 else None


def _trailer_commit(git: SafeGit, key: TaskKey, since: str, onto: str) -> str | None:
    line = f"{TASK_TRAILER}: {key}"
    log = git.read_capped(
        "log",
        "--no-show-signature",
        "--format=%H%x00%B%x00",
        "-F",
        f"--grep={line}",
        f"{since}..{onto}",
        max_bytes=MAX_LOG_BYTES,
    ).data.decode("utf-8", errors="replace")
    fields = log.split("\0")
    for commit, body in zip(fields[0::2], fields[1::2], strict=False):
        if line in (text.strip() for text in body.splitlines()):  # exact: the grep alone also finds `<key>x`
            return commit.strip()
    return None


def _same_patch(git: SafeGit, tip: str, since: str, onto: str) -> bool:
    listing = (
        git.run("cherry", onto, tip, since, timeout=CHECK_TIMEOUT_S).decode("utf-8", errors="replace").splitlines()
    )
    return bool(listing) and all(line.startswith("- ") for line in listing)


def _contained(git: SafeGit, tip: str, onto: str, onto_tree: str | None) -> bool:
    code, output = git.run_status(
        "merge-tree", "--write-tree", "--no-messages", onto, tip, allowed=(0, 1), timeout=CHECK_TIMEOUT_S
    )
    return code == 0 and output.split(b"\n", 1)[0].decode().strip() == onto_tree


def find_merge(git: SafeGit, key: TaskKey | None, tips: list[str], default: DefaultBranch) -> Merge | None:
    """The first check that finds any of `tips` (the branch now, and every tip the task published) in the default
    branch, cheapest first. No key (a run that is no named night's: its commits carry no task trailer): no trailer
    check."""
    onto = default.commit
    # Which tips are commits git has, and the default branch's tree (what a merge holding all of a change makes), in
    # one look-up.
    unique = list(dict.fromkeys(tips))
    *commits, onto_tree = git.object_ids([*(f"{tip}^{{commit}}" for tip in unique), f"{onto}^{{tree}}"])
    present = {tip: commit for tip, commit in zip(unique, commits, strict=True) if commit is not None}
    # A tip is an ancestor of the default branch exactly when it is their merge base: one `merge-base` per tip
    # answers the first check and gives the later ones where the branch left the default branch.
    bases: dict[str, str | None] = {}
    for tip, commit in present.items():
        bases[tip] = _merge_base(git, tip, onto)
        if bases[tip] == commit:
            return Merge("ancestor")
    for tip in present:
        since = bases[tip] or _rev(git, "merge-base", tip, onto)  # none: git's own error (unrelated histories)
        if key is not None and (commit := _trailer_commit(git, key, since, onto)) is not None:
            return Merge("trailer", commit)
        if _same_patch(git, tip, since, onto):
            return Merge("patch_id")
        if _contained(git, tip, onto, onto_tree):
            return Merge("contained")
    return None


def conflicts(git: SafeGit, tip: str, onto: str) -> list[str]:
    """The paths a merge of `tip` onto `onto` conflicts in ([] when it merges cleanly)."""
    code, output = git.run_status(
        "merge-tree",
        "--write-tree",
        "--name-only",
        "--no-messages",
        "-z",
        onto,
        tip,
        allowed=(0, 1),
        timeout=CHECK_TIMEOUT_S,
    )
    if code == 0:
        return []
    return [name.decode("utf-8", errors="replace") for name in output.split(b"\0")[1:] if name]
