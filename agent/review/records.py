"""The runs directory as review reads it: runs newest first, one run's record, a task named on the command line."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from agent.protocol.config import NightConfig, RunConfig
from agent.protocol.records import RunSummary, TaskSummary
from agent.record.journal import NIGHT_RECORD, run_directories
from agent.record.report import split_patch

NEAREST_SHOWN = 3
LISTED_WHEN_NONE_CLOSE = 5


class ReviewError(Exception):
    """Bad input (an unknown run, task, branch, remote or ref): str() is the one line the user sees; exit 2."""


def unknown(kind: str, given: str, existing: list[str]) -> ReviewError:
    """'no run X; nearest: a, b' naming what exists, the closest first."""
    if not existing:
        return ReviewError(f"no {kind} {given!r}: there is none")
    close = difflib.get_close_matches(given, existing, n=NEAREST_SHOWN, cutoff=0.3)
    if close:
        return ReviewError(f"no {kind} {given!r}; nearest: {', '.join(close)}")
    shown = existing[:LISTED_WHEN_NONE_CLOSE]
    more = f" (and {len(existing) - len(shown)} more)" if len(existing) > len(shown) else ""
    return ReviewError(f"no {kind} {given!r}; there are: {', '.join(shown)}{more}")


@dataclass(frozen=True)
class RunRecord:
    directory: Path
    summary: RunSummary

    @property
    def run_id(self) -> str:
        return self.summary.run_id

    def config(self) -> RunConfig | None:
        """The run's resolved settings; None when config.json is missing or unreadable."""
        try:
            return RunConfig.model_validate_json((self.directory / "config.json").read_bytes())
        except (OSError, ValidationError):
            return None

    def config_for(self, repo: Path) -> RunConfig | None:
        """The settings the run used for `repo`: a night's own entry for it (a night has several), else config()."""
        try:
            night = NightConfig.model_validate_json((self.directory / NIGHT_RECORD).read_bytes())
        except (OSError, ValidationError):
            return self.config()
        for config in night.repos:
            if config.repo.resolve() == repo.resolve():
                return config
        return self.config()

    def diffs(self) -> dict[int, str]:
        """Each task's diff as the run recorded it in patch.diff."""
        patch = self.directory / "patch.diff"
        return split_patch(patch.read_text(encoding="utf-8", errors="replace")) if patch.exists() else {}

    def task(self, index: int) -> TaskSummary:
        for task in self.summary.tasks:
            if task.index == index:
                return task
        numbers = ", ".join(str(task.index) for task in self.summary.tasks) or "none"
        raise ReviewError(f"no task {self.run_id}/{index}: the run's tasks are {numbers}")


def _started(record: RunRecord) -> datetime:
    try:
        return datetime.fromisoformat(record.summary.started_at)
    except ValueError:
        return datetime.fromtimestamp((record.directory / "summary.json").stat().st_mtime).astimezone()


def list_runs(runs_dir: Path) -> list[RunRecord]:
    """Every run with a readable summary.json, newest first."""
    if not runs_dir.is_dir():
        raise ReviewError(f"--runs-dir {runs_dir}: no such directory")
    records = []
    for directory in run_directories(runs_dir):
        try:
            summary = RunSummary.model_validate_json((directory / "summary.json").read_bytes())
        except (OSError, ValidationError):
            continue  # a run that crashed before its first summary, or not a run at all
        records.append(RunRecord(directory, summary))
    return sorted(records, key=lambda record: (_started(record), record.run_id), reverse=True)


def load_run(runs_dir: Path, run_id: str) -> RunRecord:
    runs = list_runs(runs_dir)
    for record in runs:
        if record.run_id == run_id:
            return record
    raise unknown("run", run_id, [record.run_id for record in runs])


@dataclass(frozen=True)
class TaskRef:
    run: RunRecord
    task: TaskSummary


def find_task(runs_dir: Path, target: str) -> TaskRef:
    """BRANCH_OR_TASK: `RUN/N` (task N of RUN), `N` (task N of the latest run), or a task's branch name."""
    runs = list_runs(runs_dir)
    if not runs:
        raise ReviewError(f"no runs in {runs_dir}")
    if target.isdigit():
        return TaskRef(runs[0], runs[0].task(int(target)))
    run_id, _, number = target.rpartition("/")
    if number.isdigit():
        for record in runs:
            if record.run_id == run_id:
                return TaskRef(record, record.task(int(number)))
    branches = {}
    for record in runs:
        for task in record.summary.tasks:
            if task.branch:
                branches.setdefault(task.branch, TaskRef(record, task))
    if target in branches:
        return branches[target]
    tasks = [f"{record.run_id}/{task.index}" for record in runs for task in record.summary.tasks]
    raise unknown("branch or task", target, list(branches) + tasks)
