"""Which run records may go (`refactor-agent gc`): the finished runs beyond the newest `keep`, except a run whose
task branch still holds the commit it made (its transcript is the evidence `review` shows for that branch).

Never a run that is running or can be resumed, never one whose summary does not read (it is left as it is, said
so), and never anything but a real directory named like a run id: a link planted in the runs directory is not
followed, and nothing outside the runs directory is removed.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from agent.protocol.config import RUN_ID_PATTERN
from agent.protocol.records import RunSummary
from agent.record.progress import ResumeError, load_run_night

RUN_ID = re.compile(RUN_ID_PATTERN)  # what new_run_id() makes (journal.py)
BranchTips = Callable[[Path], dict[str, str]]  # a repository's task branches and their commits


@dataclass(frozen=True)
class RunRecordFate:
    path: Path
    bytes: int
    summary: RunSummary | None
    kept: str | None = None  # why it stays beyond the bound
    resumable: bool = False  # running, or can be resumed
    within: bool = False  # one of the newest `keep` finished runs

    @property
    def goes(self) -> bool:
        return self.kept is None and not self.within


def tree_bytes(path: Path) -> int:
    """The size of a directory's regular files, links not followed."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                info = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total


def _run_directories(runs_dir: Path) -> list[Path]:
    """Real directories named like a run id, oldest first (run ids start with their time)."""
    found = []
    for name in sorted(os.listdir(runs_dir)) if runs_dir.is_dir() else []:
        path = runs_dir / name
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if RUN_ID.fullmatch(name) and stat.S_ISDIR(info.st_mode):
            found.append(path)
    return found


def _summary(run_dir: Path) -> RunSummary | None:
    try:
        return RunSummary.model_validate_json((run_dir / "summary.json").read_bytes())
    except (OSError, ValidationError):
        return None


def _evidence(summary: RunSummary, tips: BranchTips) -> str | None:
    for task in summary.tasks:
        if task.branch and task.commit and tips(Path(task.repo)).get(task.branch) == task.commit:
            return f"{task.branch} still holds its commit"
    return None


def run_record_fates(runs_dir: Path, keep: int, tips: BranchTips) -> list[RunRecordFate]:
    """Each run record of `runs_dir`, newest first, with what gc does with it."""
    fates = []
    finished = 0
    for run_dir in reversed(_run_directories(runs_dir)):
        size, summary = tree_bytes(run_dir), _summary(run_dir)
        try:
            load_run_night(run_dir)
            fates.append(RunRecordFate(run_dir, size, summary, "it is running or can be resumed", resumable=True))
            continue
        except ResumeError:
            pass
        if summary is None:
            fates.append(RunRecordFate(run_dir, size, None, "its summary.json does not read: left as it is"))
            continue
        finished += 1
        if finished <= keep:
            fates.append(RunRecordFate(run_dir, size, summary, within=True))
            continue
        fates.append(RunRecordFate(run_dir, size, summary, _evidence(summary, tips)))
    return fates


def remove_run_record(path: Path) -> None:
    """Delete one run directory; a link put in its place since it was looked at is refused, never followed."""
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        raise OSError(f"{path} is no longer a directory")
    shutil.rmtree(path)
