"""Each run's scratch directory carries an owner record, so what a killed run leaves behind can be removed.

A run keeps its task worktrees under one scratch directory of its own, created before any worktree, whose
owner record names the process (see sandbox.owner) and the repository's git directory. A later run, or
`refactor-agent sandbox sweep`, deletes the directories of owners that are gone and git's records of their
worktrees, after which their branches can be deleted with `git branch -D`. Branches, and the commits on them,
are never deleted here: a branch is the night's result, and resume reuses it.

In the user's repository only git's records of our own worktrees (<git dir>/worktrees/<name>, found by the path
git wrote in them) are deleted, no git command runs; the worktrees themselves (model-written, hostile) are never
read, only deleted without following symlinks.

An environment build's scratch directory (the committed tree it builds from, its tools and the egress proxy's
socket) carries the same kind of owner record, without a git directory: it holds no worktree. So does a command's
empty folder for git's hooks, under a name of its own: a run holds one from start to end, and its leftover is no
environment build (a sweep counts those for the user).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ValidationError

from sandbox.owner import current_owner, owner_is_gone

SCRATCH_PREFIX = "refactor-agent-run-"
BUILD_SCRATCH_PREFIX = "refactor-agent-env-"
HOOKS_SCRATCH_PREFIX = "refactor-agent-hooks-"
OWNER_RECORD = "owner.json"
# Our owner record and git's worktree records are a few hundred bytes: anything larger is not one of them.
MAX_RECORD_BYTES = 64 * 1024


class ScratchOwner(BaseModel):
    owner: str
    run_id: str = ""
    git_dir: Path | None = None  # the repository whose worktrees it holds; None for a build's


def create_run_scratch(run_id: str, git_dir: Path, *, root: Path | None = None) -> Path:
    """The run's scratch directory (mode 0700), owner record written before anything else goes in."""
    safe_run_id = re.sub(r"[^a-zA-Z0-9_.-]", "-", run_id)[:60]
    directory = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{safe_run_id}-", dir=root))
    record = ScratchOwner(owner=current_owner(), run_id=run_id, git_dir=git_dir)
    (directory / OWNER_RECORD).write_text(record.model_dump_json(), encoding="utf-8")
    return directory


@contextlib.contextmanager
def run_scratch(run_id: str, git_dir: Path, *, root: Path | None = None) -> Iterator[Path]:
    """A run's scratch directory for the length of a block (a refresh's checkout of the user's repository): removed
    at its end with its worktrees and git's records of them; a kill -9 leaves it to the next run's sweep."""
    directory = create_run_scratch(run_id, git_dir, root=root)
    try:
        yield directory
    finally:
        remove_run_scratch(directory, git_dir)


def remove_run_scratch(directory: Path, git_dir: Path | None) -> None:
    """Delete the directory and every worktree in it, and git's record of those worktrees; idempotent."""
    scratch = directory.resolve()
    if git_dir is not None:
        _forget_worktrees_in(scratch, git_dir)
    shutil.rmtree(scratch, ignore_errors=True)  # never follows a symlink out of the tree


@contextlib.contextmanager
def build_scratch(*, root: Path | None = None, prefix: str = BUILD_SCRATCH_PREFIX) -> Iterator[Path]:
    """A scratch directory of this process (an environment build's; with HOOKS_SCRATCH_PREFIX a command's empty
    hooks folder): mode 0700, owner record first, removed when the block ends; a kill -9 leaves it to the next run's
    sweep."""
    directory = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    (directory / OWNER_RECORD).write_text(ScratchOwner(owner=current_owner()).model_dump_json(), encoding="utf-8")
    try:
        yield directory
    finally:
        remove_run_scratch(directory, None)


def _forget_worktrees_in(scratch: Path, git_dir: Path) -> None:
    """Delete git's record (<git dir>/worktrees/<name>) of each worktree inside `scratch`, and only those:
    `git worktree prune` would also drop the records of the user's own worktrees that are not mounted now."""
    try:
        records = list((git_dir / "worktrees").iterdir())
    except OSError:
        return
    for record in records:
        location = read_small(record / "gitdir")  # "<worktree>/.git", written by git when it made the worktree
        if location is not None and Path(location.strip()).is_relative_to(scratch):
            shutil.rmtree(record, ignore_errors=True)


def forget_vanished_worktree(git_dir: Path, branch: str) -> None:
    """Delete git's record of a worktree of `branch` whose directory is gone (a reboot emptied /tmp, taking the
    scratch directory and its owner record with it): git would refuse to check the branch out again."""
    try:
        records = list((git_dir / "worktrees").iterdir())
    except OSError:
        return
    for record in records:
        location = read_small(record / "gitdir")
        head = read_small(record / "HEAD")
        if location is None or head is None or head.strip() != f"ref: refs/heads/{branch}":
            continue
        if not os.path.lexists(location.strip()):
            shutil.rmtree(record, ignore_errors=True)


# What git writes in a HEAD file naming a branch (a conservative subset of the names git accepts: no "..", no part
# starting with "." or ending in ".lock" or ".", none of git's special characters), and in a loose ref file: what the
# host reads of git's own files without a git process. Any other content is git's to read.
_PART = r"[A-Za-z0-9_-](?:[A-Za-z0-9._-]*[A-Za-z0-9_-])?"
_BRANCH_HEAD = re.compile(r"ref: (refs/heads/(?!.*\.lock(?:/|\n))" + _PART + r"(?:/" + _PART + r")*)\n")
_LOOSE_REF = re.compile(r"(?:[0-9a-f]{40}|[0-9a-f]{64})\n")


def written_branch(head_file: Path) -> str | None:
    """The branch (refs/heads/...) a HEAD file names, when it holds exactly what git writes for a plain name."""
    written = read_small(head_file)
    found = _BRANCH_HEAD.fullmatch(written) if written is not None else None
    return found[1] if found is not None and ".." not in found[1] else None


def written_object_id(ref_file: Path) -> str | None:
    """The object a loose ref file names, when it holds exactly what git writes."""
    written = read_small(ref_file)
    return written.strip() if written is not None and _LOOSE_REF.fullmatch(written) else None


def read_small(path: Path) -> str | None:
    """A file of our own or of git's, read without following a symlink and within a byte cap."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(descriptor, "rb") as file:
            return file.read(MAX_RECORD_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None


def _owner_record(directory: Path) -> ScratchOwner | None:
    """The record of a directory that we created: a real directory of our user, not a symlink planted in /tmp."""
    try:
        info = directory.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        return None
    text = read_small(directory / OWNER_RECORD)
    try:
        return ScratchOwner.model_validate_json(text) if text is not None else None
    except ValidationError:
        return None


def stale_scratch(*, root: Path | None = None, prefix: str = SCRATCH_PREFIX) -> list[tuple[Path, ScratchOwner]]:
    """The scratch directories (with BUILD_SCRATCH_PREFIX: of environment builds) whose process has ended."""
    stale = []
    for directory in sorted(Path(root or tempfile.gettempdir()).glob(f"{prefix}*")):
        record = _owner_record(directory)
        if record is not None and owner_is_gone(record.owner):
            stale.append((directory, record))
    return stale


def sweep_run_scratch(*, root: Path | None = None, prefix: str = SCRATCH_PREFIX) -> int:
    """Remove the scratch directories (and worktrees) of runs whose process has ended, or with BUILD_SCRATCH_PREFIX
    (HOOKS_SCRATCH_PREFIX) those of environment builds (hooks folders); returns how many."""
    stale = stale_scratch(root=root, prefix=prefix)
    for directory, record in stale:
        remove_run_scratch(directory, record.git_dir)
    return len(stale)


def sweep_all_scratch(*, root: Path | None = None) -> tuple[int, int]:
    """Every kind of leftover scratch: returns how many unfinished runs' worktrees and scratch directories, and how
    many unfinished environment builds' scratch directories, were removed. Killed commands' empty hooks folders go
    too, uncounted: there is nothing in them to tell the user about."""
    runs = sweep_run_scratch(root=root)
    builds = sweep_run_scratch(root=root, prefix=BUILD_SCRATCH_PREFIX)
    sweep_run_scratch(root=root, prefix=HOOKS_SCRATCH_PREFIX)
    return runs, builds
