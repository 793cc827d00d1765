"""One run per repository: a lock file in the repository's git directory, created with O_EXCL.

It names its holder (run id, the process as sandbox.owner records it, the start time), so a second run says
who holds the repository; a holder whose process has ended (kill -9, a reboot) is taken over with a log line.
Different repositories have different locks and may run at the same time.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from agent.protocol.records import now_iso
from agent.worktree.leftovers import read_small
from sandbox.owner import current_owner, owner_is_gone

LOCK_NAME = "refactor-agent.lock"


class LockHeld(Exception):
    """str() is the one line the user sees."""


class LockRecord(BaseModel):
    run_id: str
    owner: str  # host:pid:kernel start time (sandbox.owner)
    started_at: str
    unreadable: bool = Field(False, exclude=True)  # garbage in the lock file: no live holder to protect

    def describe(self) -> str:
        host, _, rest = self.owner.partition(":")
        pid = rest.partition(":")[0]
        return f"run {self.run_id} (pid {pid} on {host}, started {self.started_at})"


class RepoLock:
    def __init__(self, git_common_dir: Path, run_id: str) -> None:
        self.path = git_common_dir / LOCK_NAME
        self.record = LockRecord(run_id=run_id, owner=current_owner(), started_at=now_iso())
        self.held = False

    def acquire(self, repo: Path, log: Callable[[str], None]) -> None:
        for _attempt in range(3):  # a holder that ends between our two looks is simply looked at again
            if self._create():
                return
            holder = self._holder()
            if holder is None:
                continue
            if not holder.unreadable and not owner_is_gone(holder.owner):
                raise LockHeld(f"{repo} is in use by {holder.describe()}; lock file {self.path}")
            log(f"taking over the lock on {repo} from {holder.describe()}, whose process has ended")
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        raise LockHeld(f"{repo}: cannot take the lock {self.path}")

    def _create(self) -> bool:
        try:
            descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(self.record.model_dump_json())
        self.held = True
        return True

    def _holder(self) -> LockRecord | None:
        """The record in the lock file; an unreadable one counts as a dead holder's (it is replaced)."""
        text = read_small(self.path)
        if text is None:
            return None
        try:
            return LockRecord.model_validate_json(text)
        except ValidationError:
            return LockRecord(run_id="unknown", owner="unknown", started_at="unknown", unreadable=True)

    def release(self) -> None:
        """Remove the lock if it is still ours (never another run's that took over)."""
        if not self.held:
            return
        self.held = False
        holder = self._holder()
        if holder is not None and holder.owner == self.record.owner and holder.run_id == self.record.run_id:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
