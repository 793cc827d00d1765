"""Each run's scratch directory carries an owner record, so what a killed run leaves behind can be removed.

A run keeps its task worktrees under one scratch directory of its own, created before any worktree, whose
owner record names the process (see sandbox.owner) and the repository's git directory. A later run, or
`refactor-agent sandbox sweep`, deletes the directories of owners that are gone and prunes git's record of their
worktrees, after which their branches can be deleted with `git branch -D`. Branches, and the commits on them,
are never deleted here: a branch is the night's result, and resume reuses it.

The user's repository is touched only through `git worktree prune`, with hooks and fsmonitor off; the worktrees
themselves (model-written, hostile) are never read, only deleted without following symlinks.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from pydantic import BaseModel, ValidationError

from sandbox.owner import current_owner, owner_is_gone

SCRATCH_PREFIX = "refactor-agent-run-"
OWNER_RECORD = "owner.json"
# Our own record, a few hundred bytes: anything larger is not ours.
MAX_RECORD_BYTES = 64 * 1024
GIT_TIMEOUT_S = 60


class ScratchOwner(BaseModel):
    owner: str
    run_id: str
    git_dir: Path


def create_run_scratch(run_id: str, git_dir: Path, *, root: Path | None = None) -> Path:
    """The run's scratch directory (mode 0700), owner record written before anything else goes in."""
    safe_run_id = re.sub(r"[^a-zA-Z0-9_.-]", "-", run_id)[:60]
    directory = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{safe_run_id}-", dir=root))
    record = ScratchOwner(owner=current_owner(), run_id=run_id, git_dir=git_dir)
    (directory / OWNER_RECORD).write_text(record.model_dump_json(), encoding="utf-8")
    return directory


def remove_run_scratch(directory: Path, git_dir: Path) -> None:
    """Delete the directory and every worktree in it, then drop git's record of the worktrees; idempotent."""
    shutil.rmtree(directory, ignore_errors=True)  # never follows a symlink out of the tree
    prune_worktrees(git_dir)


def prune_worktrees(git_dir: Path) -> None:
    """`git worktree prune` reads only the repository's own worktree records, never a worktree's files."""
    with tempfile.TemporaryDirectory(prefix="refactor-agent-no-hooks-") as no_hooks:
        command = [
            "git", f"--git-dir={git_dir}", "-c", f"core.hooksPath={no_hooks}", "-c", "core.fsmonitor=false",
            "worktree", "prune",
        ]  # fmt: skip
        environment = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
        subprocess.run(command, capture_output=True, check=False, timeout=GIT_TIMEOUT_S, env=environment)


def _owner_record(directory: Path) -> ScratchOwner | None:
    """The record of a directory that we created: a real directory of our user, not a symlink planted in /tmp."""
    try:
        info = directory.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            return None
        descriptor = os.open(directory / OWNER_RECORD, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(descriptor, "rb") as record:
            return ScratchOwner.model_validate_json(record.read(MAX_RECORD_BYTES))
    except (OSError, ValidationError):
        return None


def sweep_run_scratch(*, root: Path | None = None) -> int:
    """Remove the scratch directories (and worktrees) of runs whose process has ended; returns how many."""
    removed = 0
    for directory in Path(root or tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        record = _owner_record(directory)
        if record is None or not owner_is_gone(record.owner):
            continue
        remove_run_scratch(directory, record.git_dir)
        removed += 1
    return removed
