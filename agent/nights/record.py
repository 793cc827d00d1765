"""A repository's task record, runs/.tasks/<repository-key>.json: what became of each task of its night files.

Written whole (agent/record/atomic.py) under a file lock (fcntl, held for milliseconds) and a thread lock (a
fleet's threads): the night that writes it also holds the repository lock, so two nights never write it at once,
and `review` takes only the file lock. Read without a lock (the file is always whole). A missing or unparsable file
is rebuilt from git (the unparsable one kept beside it; `night --plan`'s store only reads it so); a record of a
newer version is refused, never overwritten. Every ref move is written to `pending` first (agent/nights/publish.py)
and settled from git at the next load."""

from __future__ import annotations

import contextlib
import fcntl
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic import ValidationError

from agent.nights.errors import NightError
from agent.nights.rebuild import rebuild
from agent.protocol.nights import PendingMove, TaskKey, TaskRecord, TaskRecordFile
from agent.record.atomic import write_atomically
from agent.safety.printable import counted
from agent.safety.private_dirs import private_dir
from agent.worktree.safe_git import GitError, SafeGit

RECORDS_DIR = ".tasks"
MAX_RECORD_BYTES = 64 * 1024**2
_THREADS = threading.Lock()


def record_path(runs_dir: Path, key: str) -> Path:
    """runs/.tasks/<repository-key>.json."""
    return runs_dir / RECORDS_DIR / f"{key}.json"


class RecordStore:
    def __init__(
        self,
        runs_dir: Path,
        key: str,
        git: SafeGit,
        *,
        night: str,
        known: dict[TaskKey, TaskRecord],
        written_by: str,
        log: Callable[[str], None],
        read_only: bool = False,
    ) -> None:
        """`known`: tonight's tasks as a new record would hold them (for a rebuild). `read_only`: `night --plan`'s,
        which is never updated: an unparsable record is read as rebuilt and said so, nothing kept or written."""
        self.path = record_path(runs_dir, key)
        self.directory = self.path.parent
        self.git = git
        self.night = night
        self.known = known
        self.written_by = written_by
        self.log = log
        self.read_only = read_only
        self.said_unreadable = False

    def load(self, tips: dict[str, str] | None = None) -> TaskRecordFile:
        """The record as git says it is now: pending moves settled (in memory; written by the next update). `tips`:
        every branch's tip as just listed, for a rebuild (agent/nights/rebuild.py)."""
        return self._settled(self._read(rename_unreadable=False, tips=tips))

    def update(self, change: Callable[[TaskRecordFile], None], *, made: PendingMove | None = None) -> TaskRecordFile:
        """`made`: a pending move whose transaction this process just committed: its branch is at the new commit,
        not asked of git again."""
        with self._locked():
            record = self._settled(self._read(rename_unreadable=True), made)
            change(record)
            record.written_by = self.written_by
            write_atomically(self.path, record.model_dump_json(indent=1).encode())
            return record

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        private_dir(self.directory)
        with _THREADS, open(self.directory / f"{self.path.stem}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self, *, rename_unreadable: bool, tips: dict[str, str] | None = None) -> TaskRecordFile:
        try:
            with open(self.path, "rb") as file:
                data = file.read(MAX_RECORD_BYTES + 1)
        except FileNotFoundError:
            return self._rebuilt(tips)
        try:
            if len(data) > MAX_RECORD_BYTES:
                raise ValueError(f"larger than {MAX_RECORD_BYTES} bytes")
            version = json.loads(data).get("version") if data.strip().startswith(b"{") else None
            if isinstance(version, int) and version > 1:
                raise NightError(f"task record {self.path} was written by a newer refactor-agent; not rebuilt")
            return TaskRecordFile.model_validate_json(data)
        except (ValueError, ValidationError) as error:
            if isinstance(error, NightError):
                raise
            kept = self.path.with_name(f"{self.path.name}.unreadable-{self.written_by}")
            record = self._rebuilt(tips)
            what = "ValidationError" if isinstance(error, ValidationError) else error.__class__.__name__
            if rename_unreadable:
                self.path.rename(kept)
            branches = counted(len(record.tasks), "branch", "branches")
            if not self.said_unreadable:  # once: the planning reads it, then its first update renames it
                done = (
                    f"read as rebuilt from {branches}; --plan writes nothing (the night will rebuild it and keep "
                    "the old file beside it)"
                    if self.read_only
                    else f"rebuilt from {branches}; the old file is kept as {kept.name}"
                )
                self.log(f"task record {self.path} did not parse ({what}): {done}")
                self.said_unreadable = True
            return record

    def _rebuilt(self, tips: dict[str, str] | None) -> TaskRecordFile:
        return rebuild(
            self.git,
            self.night,
            self.known,
            work_tree=str(self.git.work_tree),
            git_dir=str(self.git.git_dir),
            written_by=self.written_by,
            tips=tips,
        )

    def _settled(self, record: TaskRecordFile, made: PendingMove | None = None) -> TaskRecordFile:
        """Each pending move as git says it ended: done (the branch is at its new commit), never happened (at its
        old one), or moved by someone else (outside)."""
        for move in record.pending:
            task = record.tasks.get(move.key)
            tip = move.new if move == made else self._tip(move.branch)
            if task is None or tip == move.old:
                continue
            if tip == move.new:
                task.tip = move.new
                task.fate = "waiting" if move.new is not None else "no_changes"
            else:
                task.fate = "outside"
        record.pending = []
        return record

    def _tip(self, branch: str) -> str | None:
        try:
            return self.git.run("rev-parse", "--verify", "-q", f"refs/heads/{branch}").decode().strip() or None
        except GitError:
            return None
