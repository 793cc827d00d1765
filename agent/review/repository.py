"""The user's repository as review touches it: reads, and the ref changes it is asked for (push, delete, move).

Every call goes through SafeGit (hooks and fsmonitor off, no optional locks), and none writes the user's working
tree, index or current branch: diffs are between commits, messages come from the object store, and a branch that
is checked out anywhere is never deleted or moved.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import git

from agent.record.journal import PATCH_MAX_BYTES
from agent.review.records import ReviewError, unknown
from agent.worktree.safe_git import CappedOutput, GitError, SafeGit
from agent.worktree.workspace import BRANCH_PREFIX, WIP_REF_PREFIX, WorkspaceError, open_repository, user_git

# A diff to read, not to apply: no external diff or textconv program of anyone's, and git's own a/ b/ prefixes
# whatever diff.noprefix or diff.mnemonicPrefix the user set.
READ_DIFF_OPTIONS = ("--no-ext-diff", "--no-textconv", "--no-color", "--src-prefix=a/", "--dst-prefix=b/")


@dataclass(frozen=True)
class Lease:
    """--force-with-lease's expectation: the remote's branch is at `expected`; None: the remote has no such
    branch."""

    expected: str | None


class StaleLease(Exception):
    """The remote's branch is not where the lease expected it: someone else moved it."""


class UserRepository:
    def __init__(self, repo: git.Repo, safe_git: SafeGit) -> None:
        self.repo = repo
        self.git = safe_git

    def tip(self, branch: str) -> str | None:
        """The commit a branch points at; None when there is no such branch."""
        try:
            ref = f"refs/heads/{branch}^{{commit}}"
            return self.git.run("rev-parse", "--verify", "--quiet", "--end-of-options", ref).strip().decode()
        except GitError:
            return None

    def resolve(self, ref: str) -> str:
        """A ref the user named (a branch, tag or commit) as a commit id."""
        try:
            return (
                self.git.run("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
                .strip()
                .decode()
            )
        except GitError:
            names = self.git.run("for-each-ref", "--format=%(refname:short)", "refs/heads", "refs/tags")
            raise unknown("ref", ref, names.decode("utf-8", errors="replace").split()) from None

    def message(self, commit: str) -> str:
        """A commit's message from the object store (no `log`, whose config could call gpg)."""
        raw = self.git.run("cat-file", "commit", commit).decode("utf-8", errors="replace")
        return raw.partition("\n\n")[2]

    def diff(self, commit: str) -> CappedOutput:
        """What one commit changed against its parent, at most PATCH_MAX_BYTES of it."""
        return self.git.read_capped("diff", *READ_DIFF_OPTIONS, f"{commit}^", commit, max_bytes=PATCH_MAX_BYTES)

    def commits_onto(self, onto: str, tip: str) -> list[str]:
        """The commits `git rebase onto` would replay: reachable from tip and not from onto, oldest first."""
        listing = self.git.run("rev-list", "--reverse", "--no-merges", f"{onto}..{tip}")
        return listing.decode().split()

    def remotes(self) -> list[str]:
        return self.git.run("remote").decode("utf-8", errors="replace").split()

    def push(self, remote: str, branch: str, lease: Lease | None = None) -> None:
        """The branch to REMOTE under the same name; with a lease only while the remote's branch is where the lease
        expects it (else StaleLease, and nothing is pushed)."""
        if remote not in (remotes := self.remotes()):
            raise unknown("remote", remote, remotes)
        ref = f"refs/heads/{branch}"
        leased = [] if lease is None else [f"--force-with-lease={ref}:{lease.expected or ''}"]
        code, out = self.git.run_status(
            "push",
            "--no-verify",
            "--quiet",
            "--porcelain",
            *leased,
            "--end-of-options",
            remote,
            f"{ref}:{ref}",
            allowed=(0, 1),
        )
        if code == 0:
            return
        # --porcelain: a refused ref is `!<TAB>from:to<TAB>[rejected] (why)`.
        rejected = [line.split("\t")[-1] for line in out.decode("utf-8", errors="replace").splitlines()]
        why = next((line for line in rejected if line.startswith("[")), "refused")
        if lease is not None and "(stale info)" in why:
            raise StaleLease(why)
        raise GitError(f"git push failed: {why}")

    def checked_out(self) -> set[str]:
        """Branches checked out in the user's checkout or any of its worktrees: never deleted or moved."""
        listing = self.git.run("worktree", "list", "--porcelain").decode("utf-8", errors="replace")
        return {line.removeprefix("branch refs/heads/") for line in listing.splitlines() if line.startswith("branch ")}

    def _ours(self, branch: str) -> str:
        if not branch.startswith(BRANCH_PREFIX):
            raise WorkspaceError(f"refusing to change {branch}: only {BRANCH_PREFIX}* branches are refactor-agent's")
        if branch in self.checked_out():
            raise WorkspaceError(f"{branch} is checked out; switch away from it first")
        return f"refs/heads/{branch}"

    def delete(self, branch: str, expected: str) -> None:
        """Delete a task branch, only if it still points where we saw it."""
        self.git.run("update-ref", "-d", self._ours(branch), expected)

    def task_branches(self) -> dict[str, str]:
        """Every refactor-agent/* branch and the commit it points at."""
        listing = self.git.run(
            "for-each-ref", "--format=%(refname:lstrip=2) %(objectname)", f"refs/heads/{BRANCH_PREFIX}"
        )
        return dict(line.rsplit(" ", 1) for line in listing.decode("utf-8", errors="replace").splitlines())

    def wip_runs(self) -> dict[str, list[str]]:
        """The runs that kept work-in-progress refs for resume, and those refs (refs/refactor-agent/wip/<run>/*)."""
        listing = self.git.run("for-each-ref", "--format=%(refname)", WIP_REF_PREFIX)
        runs: dict[str, list[str]] = {}
        for ref in listing.decode("utf-8", errors="replace").split():
            runs.setdefault(ref.removeprefix(WIP_REF_PREFIX).partition("/")[0], []).append(ref)
        return runs

    def drop_wip(self, run_id: str) -> list[str]:
        """Delete the work-in-progress refs an unfinished run kept for resume (refs/refactor-agent/wip/<run>/*)."""
        prefix = f"{WIP_REF_PREFIX}{run_id}/"
        refs = self.git.run("for-each-ref", "--format=%(refname)", prefix).decode("utf-8", errors="replace").split()
        for ref in refs:
            self.git.run("update-ref", "-d", ref)
        return refs

    def move(self, branch: str, new: str, expected: str) -> None:
        """Point a task branch at `new`, only if it still points at `expected`."""
        self.git.run("update-ref", "-m", "refactor-agent review rebase", self._ours(branch), new, expected)


@contextmanager
def user_repository(path: Path) -> Iterator[UserRepository]:
    try:
        repo = open_repository(path)
    except WorkspaceError as error:
        raise ReviewError(str(error)) from None
    with tempfile.TemporaryDirectory(prefix="refactor-agent-no-hooks-") as hooks_dir:
        yield UserRepository(repo, user_git(repo, Path(hooks_dir)))
