"""A task's private checkout: a git worktree of the user's HEAD on a new branch, in a scratch directory.

The user's working tree, index, HEAD, current branch and stash are never written: the worktree has its own
index and HEAD, and the only things added to the user's repository are the task branch and git's own
bookkeeping for the worktree (removed with it). The worktree is the model's, so nothing in it steers host git:
every git call goes through SafeGit with the git dir found from the user's repository.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
import threading
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import git

from agent.worktree.leftovers import forget_vanished_worktree, written_branch, written_object_id
from agent.worktree.safe_git import BlobReader, CappedOutput, GitError, SafeGit

# Caches that test runs and tools leave behind: never part of a refactoring, even where the repository's own
# .gitignore forgets them. Untracked files only; changes to tracked files are always committed.
ARTIFACT_PATTERNS = (
    "__pycache__/",
    "*.py[cod]",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".hypothesis/",
    ".coverage",
    ".coverage.*",
    ".tox/",
    ".nox/",
)
# Commit messages longer than this are cut; the whole text stays in summary.json.
MAX_COMMIT_MESSAGE_CHARS = 8_000
BRANCH_PREFIX = "refactor-agent/"
PRIVATE_REF_PREFIX = "refs/refactor-agent/"  # wip snapshots, a night's history refs (agent/nights/history.py)
# The files of an unfinished task after each tool call, one ref per task: what resume continues from, even when
# the scratch directory is gone (a reboot). Deleted when the task is settled.
WIP_REF_PREFIX = f"{PRIVATE_REF_PREFIX}wip/"
# No external diff or textconv program of anyone's runs, and no colour codes.
NO_DIFF_PROGRAMS = ("--no-ext-diff", "--no-textconv", "--no-color")
# A patch `git apply` takes, binary files included.
DIFF_OPTIONS = ("--binary", *NO_DIFF_PROGRAMS)
# `git worktree add/remove` read every worktree's admin files, and one being written by another thread's call
# fails them ("failed to read .../worktrees/worktreeN/commondir"): tasks in threads (--parallel, a fleet) take
# turns. Other processes never work on the same repository at once (agent/run/lock.py).
_WORKTREE_CHANGES = threading.Lock()
FALLBACK_IDENTITY = {
    "GIT_AUTHOR_NAME": "refactor-agent",
    "GIT_AUTHOR_EMAIL": "refactor-agent@localhost",
    "GIT_COMMITTER_NAME": "refactor-agent",
    "GIT_COMMITTER_EMAIL": "refactor-agent@localhost",
}
# What a new task branch starts at when the run names no base: the user's HEAD as a commit, resolved by the very
# `worktree add` that makes the branch (a process of its own: GitPython's object lookups share one `cat-file --batch`
# pipe per Repo, which two tasks in threads would hang on), then read from the branch.
USER_HEAD = "HEAD^{commit}"
# `Name <email>`: git's own identity form, as the commits' author setting (RunConfig.author) gives it.
_IDENTITY = re.compile(r"(?P<name>[^<>]*[^<>\s])\s*<(?P<email>[^<>\s]+)>")


def author_identity(author: str, model: str) -> dict[str, str]:
    """The git environment that makes `author` (`{model}`: the model the task's server runs) the commits' author;
    ValueError when it is not `Name <email>` or holds a control character."""
    shown = author.replace("{model}", re.sub(r"[<>\x00-\x1f\x7f]", "", model))
    match = _IDENTITY.fullmatch(shown.strip())
    if match is None or any(unicodedata.category(character) == "Cc" for character in shown):
        raise ValueError(f'{author!r}: not "Name <email>"')
    return {"GIT_AUTHOR_NAME": match["name"], "GIT_AUTHOR_EMAIL": match["email"]}


def wip_ref(run_id: str, index: int) -> str:
    return f"{WIP_REF_PREFIX}{run_id}/{index}"


class WorkspaceError(Exception):
    """One-line problem with the user's repository."""


def task_slug(task: str, limit: int = 40) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", task.lower()).strip("-")
    return slug[:limit].rstrip("-") or "task"


def open_repository(path: Path) -> git.Repo:
    """The user's repository, checked: a git work tree with at least one commit."""
    if not path.exists():
        raise WorkspaceError(f"{path}: no such directory")
    try:
        repo = git.Repo(path, search_parent_directories=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise WorkspaceError(f"{path} is not a git repository (run `git init` and commit first)") from None
    if repo.bare:
        raise WorkspaceError(f"{path} is a bare repository; point refactor-agent at a checkout")
    try:  # from the ref files: `repo.head.commit` would start a git process to look the commit up
        git.SymbolicReference.dereference_recursive(repo, "HEAD")
    except ValueError:  # an unborn branch
        raise WorkspaceError(f"{path} has no commits yet; commit the code the agent should work on") from None
    return repo


def user_git(repo: git.Repo, hooks_dir: Path) -> SafeGit:
    """The user's own repository, named by the directories GitPython found when it was opened."""
    return SafeGit(Path(repo.git_dir), Path(str(repo.working_tree_dir)), hooks_dir)


def head_commit(repo: git.Repo) -> str:
    """The user's HEAD as a commit id, read by a git process of its own: GitPython's object lookups share one
    `cat-file --batch` pipe per Repo, and two tasks reading it from their threads at once (--parallel, a fleet)
    hang on each other's replies. (A task's workspace needs none: its worktree add resolves USER_HEAD.)"""
    with tempfile.TemporaryDirectory(prefix="refactor-agent-no-hooks-") as hooks_dir:
        return user_git(repo, Path(hooks_dir)).run("rev-parse", "--verify", USER_HEAD).strip().decode()


def dirty_description(repo: git.Repo) -> str | None:
    """What `git status` reports, read without writing the user's index (no stat refresh written back)."""
    with tempfile.TemporaryDirectory(prefix="refactor-agent-no-hooks-") as hooks_dir:
        status = user_git(repo, Path(hooks_dir)).run("status", "--porcelain=v1", "-z", "--untracked-files=all")
    entries = iter(status.split(b"\0"))
    changed = untracked = 0
    for entry in entries:
        if entry.startswith(b"??"):
            untracked += 1
        elif entry:
            changed += 1
            if entry[:1] in b"RC" or entry[1:2] in b"RC":
                next(entries, None)  # a rename's or copy's source path follows as its own entry
    if not changed and not untracked:
        return None
    return f"{changed} changed and {untracked} untracked paths"


def commit_message(text: str, trailers: dict[str, str]) -> str:
    """NUL and control characters (newline and tab kept) would lose the commit; so would a message of megabytes."""
    cleaned = "".join(c for c in text if c in "\n\t" or unicodedata.category(c) != "Cc").strip()
    if len(cleaned) > MAX_COMMIT_MESSAGE_CHARS:
        cleaned = cleaned[:MAX_COMMIT_MESSAGE_CHARS].rstrip() + "\n\n[message cut; the full text is in summary.json]"
    trailer_block = "\n".join(f"{key}: {value}" for key, value in trailers.items())
    return f"{cleaned or 'refactor-agent'}\n\n{trailer_block}\n"


def _admin_dir(common_dir: Path, worktree: Path) -> Path:
    """Git's bookkeeping directory for the worktree, found from the user's side: each records its worktree."""
    expected = str(worktree / ".git")
    for candidate in (common_dir / "worktrees").iterdir():
        try:
            recorded = (candidate / "gitdir").read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            continue
        if recorded == expected:
            return candidate
    raise WorkspaceError(f"git created no bookkeeping for the worktree {worktree}")


@dataclass(frozen=True)
class UserConfig:
    """What a task's git takes from the user's config: their global ignore file, which a -c core.excludesFile of ours
    would otherwise replace, and whether it names an email to commit as."""

    excludes: str
    named: bool


def user_config(user_side: SafeGit) -> UserConfig:
    """The user's config as a task's git takes it: one git process for both, read once per run and repository (the
    run's first task reads it, agent/run/stages/workspace.py; neither changes within a run)."""
    try:
        _, listing = user_side.run_status(
            "config", "-z", "--get-regexp", r"^(core\.excludesfile|user\.email)$", allowed=(0, 1)
        )
    except GitError:
        listing = b""
    # "key\nvalue" entries (a key without a value has no line break); the last value of a key is the one git uses
    values = dict(entry.partition(b"\n")[::2] for entry in listing.split(b"\0") if entry)
    configured = values.get(b"core.excludesfile", b"").decode("utf-8", errors="replace").strip()
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    path = Path(configured).expanduser() if configured else config_home / "git" / "ignore"
    try:
        excludes = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        excludes = ""
    return UserConfig(excludes, b"user.email" in values)


def _branch_tip(repo: git.Repo, hooks_dir: Path, branch: str) -> str:
    """The commit a new branch of the user's repository is at: its loose ref file, as `worktree add` wrote it (git
    reads a loose ref before packed-refs), else git's answer (a packed or symbolic ref, another ref backend)."""
    if (written := written_object_id(Path(repo.common_dir) / "refs/heads" / branch)) is not None:
        return written
    return user_git(repo, hooks_dir).run("rev-parse", "--verify", f"refs/heads/{branch}").strip().decode()


def _identity(info: os.stat_result) -> tuple[int, int, int, int]:
    """What changes when a file is written or replaced (git writes an index anew and renames it into place)."""
    return info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW)


class Workspace:
    def __init__(
        self,
        repo: git.Repo,
        scratch: Path,
        admin_dir: Path,
        branch: str | None,
        base_commit: str,
        max_file_bytes: int,
        config: UserConfig | None = None,
    ) -> None:
        """`config`: the user's as read for an earlier task of the run (None: read now)."""
        self.user_repo = repo
        self.scratch = scratch
        self.path = scratch / "worktree"
        self.admin_dir = admin_dir
        self.branch = branch
        self.base_commit = base_commit
        self.max_file_bytes = max_file_bytes
        # Paths the last staging left out (new ones, and tracked ones kept at their base version): path -> why.
        self.uncommitted_files: dict[str, str] = {}
        # Who wrote the task's commits (author_identity: the agent and its model); empty: the committer. The
        # committer is always the user (or refactor-agent when their config names nobody).
        self.author: dict[str, str] = {}
        hooks_dir = scratch / "no-hooks"
        self.user_side = user_git(repo, hooks_dir)
        self.git = SafeGit(admin_dir, self.path, hooks_dir)
        # Outside the worktree, so the model can neither see nor edit it.
        self.excludes_file = scratch / "excludes"
        self.user_config = config or user_config(self.user_side)
        self.excludes_file.write_text(self.user_config.excludes + "\n" + "\n".join(ARTIFACT_PATTERNS) + "\n")
        # A commit's tree never changes; the wip refs are this task's alone (written here only, and each write
        # checks the value it replaces): both asked of git once.
        self._trees: dict[str, str] = {}
        self._wip_tips: dict[str, str] = {}
        # Index files staged into at least once (their stat data written); the snapshots' own index and its tree
        # (outside the worktree: only snapshot() writes it).
        self._staged_indexes: set[str] = set()
        self._wip_tree: str | None = None
        # The worktree's index while it is the one `worktree add` wrote (the base's tree with the checkout's stat
        # data), by its file's identity: the snapshots' index starts as a copy of it (_base_index).
        self._checkout_index: tuple[int, int, int, int] | None = None
        # files_at's reader, whose git read the index once: ended by whatever changes the index (each staging,
        # which every tool call's snapshot makes, and a replay).
        self._blobs = BlobReader(self.git)

    @classmethod
    def create(
        cls,
        repo: git.Repo,
        *,
        run_id: str,
        task: str,
        max_file_bytes: int,
        scratch_root: Path | None = None,
        start: str | None = None,
        config: UserConfig | None = None,
    ) -> Workspace:
        """A task's checkout of `start` (None: the user's HEAD) on its new branch refactor-agent/<run-id>/<slug>."""
        branch = f"{BRANCH_PREFIX}{run_id}/{task_slug(task)}"
        return cls._add(
            repo,
            label=task,
            prefix=f"refactor-agent-{run_id}-",
            branch=branch,
            start=start or USER_HEAD,
            max_file_bytes=max_file_bytes,
            scratch_root=scratch_root,
            config=config,
        )

    @classmethod
    def reopen(
        cls,
        repo: git.Repo,
        *,
        branch: str,
        base_commit: str,
        restore: str | None,
        max_file_bytes: int,
        scratch_root: Path | None = None,
        config: UserConfig | None = None,
    ) -> Workspace:
        """A task's branch checked out again after the process died (resume), its files put back as the wip
        commit `restore` kept them; the worktree's index is the branch's, as in the first checkout."""
        forget_vanished_worktree(Path(repo.common_dir).resolve(), branch)
        workspace = cls._add(
            repo,
            label=branch,
            prefix="refactor-agent-resume-",
            branch=branch,
            start=None,
            max_file_bytes=max_file_bytes,
            scratch_root=scratch_root,
            config=config,
            base=base_commit,
        )
        if restore is not None:
            workspace.git.run("read-tree", "-u", "--reset", restore)
            workspace.git.run("read-tree", "HEAD")
        return workspace

    @classmethod
    def detached(
        cls, repo: git.Repo, commit: str, *, label: str, max_file_bytes: int, scratch_root: Path | None = None
    ) -> Workspace:
        """A scratch checkout of `commit` on no branch, for trying changes there (review's rebase): whatever
        happens in it, no branch moves, and it cannot commit."""
        return cls._add(
            repo,
            label=label,
            prefix="refactor-agent-review-",
            branch=None,
            start=commit,
            max_file_bytes=max_file_bytes,
            scratch_root=scratch_root,
        )

    @classmethod
    def _add(
        cls,
        repo: git.Repo,
        *,
        label: str,
        prefix: str,
        branch: str | None,
        start: str | None,
        max_file_bytes: int,
        scratch_root: Path | None,
        config: UserConfig | None = None,
        base: str = "",
    ) -> Workspace:
        """A worktree on a new `branch` at `start`, detached at `start` (branch None), or on the existing
        `branch` (start None) of a task that started at `base`."""
        scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=scratch_root)).resolve()
        hooks_dir = scratch / "no-hooks"
        hooks_dir.mkdir()
        path = scratch / "worktree"
        if start is None:
            new_branch, start = [], str(branch)
        else:
            new_branch = ["-b", branch] if branch is not None else ["--detach"]
        try:
            # `worktree add -b` creates the branch at `start` without touching the user's HEAD or index;
            # with hooks off, neither post-checkout nor reference-transaction of the user's runs.
            with _WORKTREE_CHANGES:
                user_git(repo, hooks_dir).run("worktree", "add", "--quiet", *new_branch, str(path), start)
            admin_dir = _admin_dir(Path(repo.common_dir).resolve(), path)
        except (GitError, OSError) as error:
            shutil.rmtree(scratch, ignore_errors=True)
            raise WorkspaceError(f"cannot create a worktree for {label!r}: {error}") from None
        if start == USER_HEAD:  # the commit the new branch took
            start = _branch_tip(repo, hooks_dir, str(branch))
        workspace = cls(repo, scratch, admin_dir, branch, start if new_branch else base, max_file_bytes, config)
        if new_branch:  # checked out at `start`, the base (the existing branch's index is the tip's, maybe not)
            with contextlib.suppress(OSError):
                workspace._checkout_index = _identity(os.lstat(admin_dir / "index"))
        return workspace

    @property
    def git_common_dir(self) -> Path:
        """The user's .git directory, which the worktree's `.git` file points into."""
        return Path(self.user_repo.common_dir)

    def restore_git_file(self) -> None:
        """Put back the `.git` file git wrote, whatever the model made of it (for tools in the sandbox); host git does
        not read it either way. Nothing is followed: a link is removed itself."""
        entry = self.path / ".git"
        try:
            mode = os.lstat(entry).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and stat.S_ISDIR(mode):
            shutil.rmtree(entry)
        elif mode is not None:
            entry.unlink()
        descriptor = os.open(entry, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(f"gitdir: {self.admin_dir}\n")

    def _left_out(self, listing: bytes) -> tuple[dict[bytes, str], list[bytes]]:
        """Paths not to stage, with the reason: files above max_file_bytes, new or tracked (a tracked file grown past
        it would otherwise land in the user's .git whole), and repositories of their own (`git init` in a
        subdirectory), which git would add as a gitlink, or fail on when they have no commit. Second: the tracked
        ones among them, whose base version the index is to keep. `listing`: the staging's (_stage_everything)."""
        entries = [(entry[:2], entry[2:]) for entry in listing.split(b"\0") if entry]
        left_out: dict[bytes, str] = {}
        tracked = []
        for name in (name for tag, name in entries if tag == b"? "):
            if name.endswith(b"/"):  # git lists a nested repository as a directory and does not look inside
                left_out[name.rstrip(b"/")] = "a git repository of its own"
            elif (size := self._oversized(name)) is not None:
                left_out[name] = f"{size} bytes, above the limit of {self.max_file_bytes}"
        for name in (name for tag, name in entries if tag != b"? "):  # a deleted file is listed too, and has no size
            if name not in left_out and (size := self._oversized(name)) is not None:
                left_out[name] = f"{size} bytes, above the limit of {self.max_file_bytes}: its base version is kept"
                tracked.append(name)
        return left_out, tracked

    def _oversized(self, name: bytes) -> int | None:
        """The size of a regular file above max_file_bytes; None for a smaller one, a link or nothing."""
        try:  # lstat: git lists no path below a symbolic link, and a link itself is never followed
            info = os.lstat(os.fsencode(self.path) + b"/" + name)
        except OSError:
            return None
        return info.st_size if stat.S_ISREG(info.st_mode) and info.st_size > self.max_file_bytes else None

    @property
    def _exclude(self) -> tuple[str, str]:
        """Our ignore file for git: the user's global one and the artifacts tests leave (agent's ARTIFACT_PATTERNS)."""
        return ("-c", f"core.excludesFile={self.excludes_file}")

    def stage(self) -> None:
        """Stage every change in the worktree's own index: the pack lists the index, so the new files a `before`
        command made are packed for the model too."""
        self._stage_everything()

    def _stage_everything(self, env: dict[str, str] | None = None) -> bool:
        """Stage every change into the worktree's index, or the index file `env` names; False when the index already
        held every file as it is (nothing was staged)."""
        self._blobs.close()
        self.restore_git_file()
        exclude = self._exclude
        # One listing of what differs from the index, each name after its tag: "? " new (untracked, not ignored),
        # "C " tracked and changed (content compared where the stat data differ); the excludes apply to untracked
        # names only.
        listing = self.git.run(
            *exclude, "ls-files", "-z", "-t", "--others", "--modified", "--exclude-standard", env=env
        )
        index = (env or {}).get("GIT_INDEX_FILE", "")  # "": the worktree's own
        if not listing and index in self._staged_indexes:
            # `add` would change no entry; it would only write the stat data back, which its first run here did
            # (git compares the contents of files whose stat data it does not have, each time it lists them).
            self.uncommitted_files = {}
            return False
        left_out, tracked = self._left_out(listing)
        self.uncommitted_files = {os.fsdecode(name): reason for name, reason in left_out.items()}
        if tracked:  # an earlier staging may hold an edit of the file made before it grew: back to the base
            self.git.run(
                "reset",
                "-q",
                self.base_commit,
                "--pathspec-from-file=-",
                "--pathspec-file-nul",
                input=b"\0".join(b":(literal,top)" + name for name in tracked),
                env=env,
            )
        # Pathspecs on stdin: any number of them, and names need not be UTF-8.
        pathspecs = [b":(top)", *(b":(exclude,literal,top)" + name for name in left_out)]
        self.git.run(
            *exclude,
            "add",
            "--all",
            "--pathspec-from-file=-",
            "--pathspec-file-nul",
            input=b"\0".join(pathspecs),
            env=env,
        )
        self._staged_indexes.add(index)
        return True

    def snapshot(self, ref: str) -> str | None:
        """Keep the files as they are now as a commit on `ref` (parent: the previous snapshot, else the base):
        staged into an index file of our own outside the worktree, so the model's view of `git status` is not
        changed. None when nothing changed since the last snapshot."""
        index = {"GIT_INDEX_FILE": str(self.scratch / "wip-index")}
        if not (self.scratch / "wip-index").exists():
            self._base_index(self.scratch / "wip-index", env=index)
            self._staged_indexes.discard(index["GIT_INDEX_FILE"])
            self._wip_tree = None
        tree, self._wip_tree = self._wip_tree, None  # unknown until this staging is through
        if self._stage_everything(index) or tree is None:
            tree = self.git.run("write-tree", env=index).strip().decode()
        self._wip_tree = tree
        if ref not in self._wip_tips:  # the ref's tip ("": none yet, the update below creates it) and the trees
            tip, tip_tree, base_tree = self.git.object_ids([ref, f"{ref}^{{tree}}", f"{self.base_commit}^{{tree}}"])
            self._wip_tips[ref] = tip or ""
            for commit, its_tree in ((tip, tip_tree), (self.base_commit, base_tree)):
                if commit is not None and its_tree is not None:
                    self._trees[commit] = its_tree
        parent = self._wip_tips[ref] or self.base_commit
        if tree == self._tree_of(parent):
            return None
        message = commit_message("refactor-agent: work in progress", {"Refactor-Agent-Wip": ref})
        commit = self.git.run(
            "commit-tree", tree, "-p", parent, "-F", "-", input=message.encode(), env={**index, **self._identity()}
        )
        sha = commit.strip().decode()
        self.git.run("update-ref", "-m", "refactor-agent: wip", ref, sha, self._wip_tips[ref])
        self._wip_tips[ref], self._trees[sha] = sha, tree
        return sha

    def _base_index(self, target: Path, *, env: dict[str, str]) -> None:
        """An index file of the base's tree at `target` (`env` names it): a copy of the worktree's own while that is
        still the checkout's, with its time (git's check for entries changed in the second the index was written
        reads it), so the first staging need not hash every file again; else `read-tree` of the base."""
        try:
            with open(self.admin_dir / "index", "rb", opener=_no_follow) as file:
                info = os.fstat(file.fileno())
                if self._checkout_index is not None and _identity(info) == self._checkout_index:
                    target.write_bytes(file.read())
                    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
                    return
        except OSError:
            target.unlink(missing_ok=True)
        self.git.run("read-tree", self.base_commit, env=env)

    def _tree_of(self, commit: str) -> str:
        """The tree of a commit (a full id), asked of git once."""
        if commit not in self._trees:
            self._trees[commit] = self.git.run("rev-parse", f"{commit}^{{tree}}").strip().decode()
        return self._trees[commit]

    def drop_ref(self, ref: str) -> None:
        """Delete one of our private refs (a settled task's wip ref); idempotent."""
        if not ref.startswith(WIP_REF_PREFIX):
            raise WorkspaceError(f"refusing to delete {ref}: only {WIP_REF_PREFIX}* refs are ours to delete")
        self.user_side.run("update-ref", "-d", ref)
        self._wip_tips.pop(ref, None)

    def diff(self, *, max_bytes: int, staged: bool = False) -> CappedOutput:
        """Everything the task changed against its base, new files included; only the first max_bytes kept.
        `staged`: the caller's word that nothing changed the files since the last staging (commit's), so the index
        already holds them."""
        if not staged:
            self._stage_everything()
        return self.git.read_capped("diff", "--cached", *DIFF_OPTIONS, self.base_commit, max_bytes=max_bytes)

    def diff_stat(self, *, max_files: int) -> str:
        """`git diff --stat` of everything the task changed against its base, new files included: staged into an
        index of our own outside the worktree, as snapshot() does, so the model's view of `git status` stays its
        own. At most `max_files` file lines, then the totals line."""
        index = {"GIT_INDEX_FILE": str(self.scratch / "stat-index")}
        if not (self.scratch / "stat-index").exists():
            self._base_index(self.scratch / "stat-index", env=index)
            self._staged_indexes.discard(index["GIT_INDEX_FILE"])
        self._stage_everything(index)
        lines = self.git.run("diff", "--cached", "--stat=100", *NO_DIFF_PROGRAMS, self.base_commit, env=index)
        listed = lines.decode("utf-8", errors="replace").rstrip("\n").splitlines()
        if len(listed) <= max_files + 1:
            return "\n".join(listed)
        return "\n".join([*listed[:max_files], f" ... {len(listed) - 1 - max_files} more files", listed[-1]])

    def _refs(self, branch_ref: str) -> tuple[bytes, bytes | None]:
        """The user's HEAD and every ref that is not ours (task branches, wip snapshots, history refs), which a commit
        must leave as they were, and the tip of our `branch_ref`: one listing. Ours are not compared: tasks running in
        parallel move theirs, and a night publishes, while this one commits."""
        head = (Path(self.user_repo.git_dir) / "HEAD").read_bytes()
        listing = self.user_side.run("show-ref", "--head")  # "<id> HEAD" first (what HEAD resolves to), then each ref
        ours = (b"refs/heads/" + BRANCH_PREFIX.encode(), PRIVATE_REF_PREFIX.encode())
        others, tip = [], None
        for line in listing.splitlines():
            sha, _, name = line.partition(b" ")
            if name == branch_ref.encode():
                tip = sha
            if not name.startswith(ours):
                others.append(line)
        return head + b"\0" + b"\n".join(others), tip

    def changed_paths(self) -> list[str]:
        """Paths the task changed against its base (added, modified, deleted), as staged."""
        self._stage_everything()
        names = self.git.run("diff", "--cached", "--name-only", "-z", "--no-renames", self.base_commit)
        return [os.fsdecode(name) for name in names.split(b"\0") if name]

    def ignored_files(self, pathspecs: Sequence[str]) -> list[str]:
        """Untracked files that git ignores (a .gitignore line, our artifact patterns), among `pathspecs`: never
        committed, yet there for whatever runs in the worktree."""
        listing = self.git.run(
            *self._exclude, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--", *pathspecs
        )
        return [os.fsdecode(name) for name in listing.split(b"\0") if name]

    def files_at(
        self, wanted: Iterable[tuple[str, str]], *, limit: int
    ) -> Iterator[tuple[tuple[str, str], bytes | None]]:
        """For each (path, "before" | "after") asked for: the file's bytes at the base commit or as staged now, from
        git's blobs (never from a path on the host), None when absent or larger than `limit`. One git process for
        all the reads between two stagings (the gate's checks read twice), each read as it is iterated."""
        for path, which in wanted:
            spec = f"{self.base_commit}:{path}" if which == "before" else f":{path}"
            yield (path, which), self._blobs.read(spec, max_bytes=limit)

    def commit(self, message: str, trailers: dict[str, str]) -> str | None:
        """Commit all changes on the task branch; None when there is nothing to commit.

        Plumbing (write-tree, commit-tree, update-ref with the old value) instead of `git commit`: no hook can
        be involved, the message goes through stdin whatever its size, and the one ref written is named."""
        self._stage_everything()
        tree = self.git.run("write-tree").strip().decode()
        if tree == self._tree_of(self.base_commit):
            return None
        ref = f"refs/heads/{self.branch}"
        if self.branch is None or not self.branch.startswith(BRANCH_PREFIX):
            raise WorkspaceError(f"refusing to commit onto {ref}: only {BRANCH_PREFIX}* branches are ours")
        if not self._head_names(ref):
            raise WorkspaceError(f"the worktree's HEAD no longer names {ref}")
        user_refs, tip = self._refs(ref)
        if tip is None:
            raise WorkspaceError(f"the task branch {ref} is gone")
        parent = tip.decode()
        commit = self.git.run(
            "commit-tree",
            tree,
            "-p",
            parent,
            "-F",
            "-",
            input=commit_message(message, trailers).encode(),
            env={**self._identity(), **self.author},
        )
        sha = commit.strip().decode()
        self.git.run("update-ref", "-m", "refactor-agent: commit", ref, sha, parent)
        if self._refs(ref) != (user_refs, commit.strip()):
            raise WorkspaceError(f"refs other than {ref} changed while committing; check the repository")
        return sha

    def _head_names(self, ref: str) -> bool:
        """Whether the worktree's HEAD is the symbolic ref `ref`. Its HEAD file in our bookkeeping directory (which the
        sandbox mounts read-only) holding exactly what git writes for that answers yes without a git process; any
        other file (a link, a detached HEAD, another backend's placeholder) is git's to read."""
        if written_branch(self.admin_dir / "HEAD") == ref:
            return True
        return self.git.run("symbolic-ref", "HEAD").strip().decode() == ref

    def _identity(self) -> dict[str, str]:
        """The user's own identity when their config has one, else refactor-agent's."""
        return {} if self.user_config.named else FALLBACK_IDENTITY

    def _committer(self) -> dict[str, str]:
        """The committer alone: a cherry-pick keeps each commit's author."""
        return {key: value for key, value in self._identity().items() if key.startswith("GIT_COMMITTER_")}

    def head(self) -> str:
        return self.git.run("rev-parse", "--verify", "HEAD").strip().decode()

    def replay(self, commits: list[str]) -> list[str]:
        """Cherry-pick `commits` (oldest first) onto this detached checkout: [] when they all applied, else the
        files in conflict, with the checkout put back where it was.

        Nothing of the user's config may sign, remember resolutions (rerere writes into the user's git dir) or
        start a garbage collection in the middle of it."""
        if self.branch is not None:
            raise WorkspaceError(f"refusing to replay commits onto the task branch {self.branch}")
        quiet = ("-c", "gc.auto=0", "-c", "rerere.enabled=false", "-c", "commit.gpgSign=false")
        self._blobs.close()
        try:
            self.git.run(
                *quiet, "cherry-pick", "--allow-empty", "--keep-redundant-commits", *commits, env=self._committer()
            )
            return []
        except GitError as error:
            unmerged = self.git.run("diff", "--name-only", "-z", "--diff-filter=U")
            with contextlib.suppress(GitError):  # a pick that stopped before starting leaves nothing to abort
                self.git.run(*quiet, "cherry-pick", "--abort")
            conflicts = [os.fsdecode(name) for name in unmerged.split(b"\0") if name]
            if not conflicts:
                raise WorkspaceError(str(error)) from None
            return conflicts

    def retrailer(self, trailers: dict[str, str], *, with_changes: bool = False) -> str:
        """Give the detached HEAD commit these trailers (replacing those of the same key, git's own
        interpret-trailers); same parents and author, a new commit id, which HEAD then names. The same tree, or
        with_changes: the files as they are now (what a task's `after` commands changed, folded into the commit)."""
        if self.branch is not None:
            raise WorkspaceError(f"refusing to rewrite a commit of the task branch {self.branch}")
        head = self.head()
        header, _, message = self.git.run("cat-file", "commit", head).partition(b"\n\n")
        options = [part for key, value in trailers.items() for part in ("--trailer", f"{key}: {value}")]
        rewritten = self.git.run("interpret-trailers", "--if-exists", "replace", *options, input=message)
        author = re.search(rb"^author (.*) <(.*)> (\d+ [+-]\d{4})$", header, re.MULTILINE)
        kept_author = (
            {
                "GIT_AUTHOR_NAME": author.group(1).decode("utf-8", errors="replace"),
                "GIT_AUTHOR_EMAIL": author.group(2).decode("utf-8", errors="replace"),
                "GIT_AUTHOR_DATE": author.group(3).decode(),
            }
            if author
            else {}
        )
        parents = [
            part for line in header.splitlines() if line.startswith(b"parent ") for part in ("-p", line[7:].decode())
        ]
        if with_changes:
            self._stage_everything()
            tree = self.git.run("write-tree").strip().decode()
        else:
            tree = header.splitlines()[0].removeprefix(b"tree ").decode()  # a commit's header starts with its tree
        commit = self.git.run(
            "commit-tree", tree, *parents, "-F", "-", input=rewritten, env={**self._identity(), **kept_author}
        )
        sha = commit.strip().decode()
        self.git.run("update-ref", "--no-deref", "HEAD", sha, head)
        return sha

    def drop_branch(self) -> None:
        """Delete the task's branch, which holds no commit of the task: no empty branch is left to review. Ours only,
        only while it is still at the base commit (one that moved holds someone's work), after remove() (no
        worktree holds it then)."""
        if self.branch is None or not self.branch.startswith(BRANCH_PREFIX):
            raise WorkspaceError(f"refusing to delete {self.branch}: only {BRANCH_PREFIX}* branches are ours")
        with _WORKTREE_CHANGES:
            self.user_side.run("update-ref", "-d", f"refs/heads/{self.branch}", self.base_commit)

    def remove(self) -> None:
        """Drop the scratch checkout and git's record of it as `git worktree remove --force` does (the checkout, our
        bookkeeping directory, then <git dir>/worktrees when that is left empty), without a git process, which would
        read the model's `.git` to check it: nothing in the checkout is read or followed. The branch and its commits
        stay in the user's repository."""
        self._blobs.close()
        shutil.rmtree(self.path, ignore_errors=True)
        with _WORKTREE_CHANGES:  # a `worktree add` of another thread reads every record, and makes the folder
            # Our own bookkeeping directory, named exactly; `worktree prune` would also prune the user's.
            shutil.rmtree(self.admin_dir, ignore_errors=True)
            with contextlib.suppress(OSError):  # the user's own worktrees' records are still in it
                self.admin_dir.parent.rmdir()
        shutil.rmtree(self.scratch, ignore_errors=True)
