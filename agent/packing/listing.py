"""Which paths exist, according to git itself (nested .gitignore, info/exclude, anchored patterns)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.packing.options import PackError

SUBMODULE_MODE = "160000"
SYMLINK_MODE = "120000"
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class ListedPath:
    raw: bytes  # as git stores it: file names need not be UTF-8
    mode: str | None  # index mode; None for untracked files
    index_blob: str | None = None  # the blob id git's index holds for it; None for untracked files
    # What the model sees: undecodable bytes and control characters shown as \xNN, never dropped. Computed once,
    # since every phase asks for it.
    display: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        text = self.raw.decode("utf-8", errors="backslashreplace")
        object.__setattr__(self, "display", CONTROL_CHARACTERS.sub(lambda match: f"\\x{ord(match.group()):02x}", text))


@dataclass(frozen=True)
class RepoGit:
    """How the packer's git finds the repository it lists. A user's own checkout (`refactor-agent pack`): `git -C`,
    which reads its `.git` as the user's own git does. A task's worktree: the workspace's safe git command (its git
    dir and work tree named on the command line, no hooks, no fsmonitor, the caller's GIT_* variables dropped;
    agent/worktree/safe_git.py), because the repository's own suite runs in the sandbox while the host packs, and
    may rewrite the worktree's `.git` to name a git dir whose config runs a command."""

    prefix: tuple[str, ...]  # the argv before git's subcommand
    cwd: Path | None = None
    env: Mapping[str, str] | None = None  # None: this process's environment

    @classmethod
    def of_checkout(cls, repo_dir: Path) -> RepoGit:
        return cls(("git", "-C", str(repo_dir)))

    def run(self, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [*self.prefix, *args],
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            check=False,
            cwd=self.cwd,
            env=self.env,
        )

    def popen(self, *args: str, **options: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen([*self.prefix, *args], cwd=self.cwd, env=self.env, **options)


def _git(git: RepoGit, repo_dir: Path, *args: str) -> bytes:
    try:
        completed = git.run(*args)
    except FileNotFoundError as exc:
        raise PackError("git is not installed (needed to list the repository's files)") from exc
    if completed.returncode != 0:
        message = completed.stderr.decode("utf-8", errors="replace").strip().splitlines()
        raise PackError(f"git {args[0]} failed in {repo_dir}: {message[-1] if message else 'no message'}")
    return completed.stdout


def checked_work_tree(repo_dir: Path, git: RepoGit) -> str | None:
    """The commit HEAD names (None for a repository without commits), once `repo_dir` is checked to be the top level
    of a git work tree (else PackError)."""
    if not repo_dir.is_dir():
        raise PackError(f"{repo_dir} is not a directory")
    # One git for the three answers, a line each: "true" inside a work tree, the prefix (empty at the top level;
    # it may hold a newline, as a folder's name may), then HEAD's commit; exit 1 and no commit line without one.
    probe = git.run("rev-parse", "--is-inside-work-tree", "--show-prefix", "--verify", "-q", "HEAD^{commit}")
    inside, _, rest = probe.stdout.partition(b"\n")
    if probe.returncode not in (0, 1) or inside.strip() != b"true":
        raise PackError(f"{repo_dir} is not inside a git work tree")
    prefix, commit = rest.rstrip(b"\n").rpartition(b"\n")[::2] if probe.returncode == 0 else (rest, b"")
    if prefix.strip():
        raise PackError(f"{repo_dir} is a subdirectory of a git repository; pass its top level")
    return commit.decode() or None


def list_paths(repo_dir: Path, git: RepoGit, *, include_untracked: bool) -> list[ListedPath]:
    """Tracked paths (plus untracked, not ignored ones when asked), sorted by their bytes."""
    by_path: dict[bytes, ListedPath] = {}
    for record in _git(git, repo_dir, "ls-files", "--stage", "-z").split(b"\0"):
        if not record:
            continue
        meta, _, raw = record.partition(b"\t")
        mode, blob, _stage = meta.decode().split(" ")
        # Unmerged paths appear once per stage; any stage names the same path.
        by_path[raw] = ListedPath(raw=raw, mode=mode, index_blob=blob)
    if include_untracked:
        for raw in _git(git, repo_dir, "ls-files", "--others", "--exclude-standard", "-z").split(b"\0"):
            if raw and raw not in by_path:
                by_path[raw] = ListedPath(raw=raw, mode=None)
    return [by_path[raw] for raw in sorted(by_path)]


def modified_paths(repo_dir: Path, git: RepoGit) -> set[bytes]:
    """Tracked paths whose work-tree file may differ from the index (git compares stat data, a fast check)."""
    return {raw for raw in _git(git, repo_dir, "diff-files", "--name-only", "-z").split(b"\0") if raw}


def linguist_attributes(git: RepoGit, paths: list[ListedPath]) -> dict[bytes, str]:
    """Paths that .gitattributes marks linguist-generated or linguist-vendored, mapped to the attribute."""
    if not paths:
        return {}
    names = b"\0".join(p.raw for p in paths) + b"\0"
    completed = git.run("check-attr", "-z", "--stdin", "linguist-generated", "linguist-vendored", input=names)
    if completed.returncode != 0:
        return {}
    fields = completed.stdout.split(b"\0")
    marked: dict[bytes, str] = {}
    for index in range(0, len(fields) - 2, 3):
        raw, attribute, value = fields[index], fields[index + 1], fields[index + 2]
        if value in (b"set", b"true"):
            marked.setdefault(raw, attribute.decode())
    return marked
