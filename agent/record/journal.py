"""runs/<run-id>/: written as the run happens, one flushed line per step, so a crash leaves a readable record."""

from __future__ import annotations

import json
import os
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel

from agent.protocol.config import RUN_ID_PATTERN
from agent.protocol.events import Event
from agent.protocol.records import RunSummary
from agent.record.report import render_html, render_markdown, split_patch
from agent.safety.private_dirs import PRIVATE_MODE, private_dir

# patch.diff holds at most this much of each task's diff: a task that wrote gigabytes must not fill the disk twice.
PATCH_MAX_BYTES = 5 * 1024 * 1024
OUTPUT_LOG = "output.log"  # what the run's view printed, once its reader has gone (agent/record/fallback_stream.py)
NIGHT_RECORD = "night.json"  # the night's settings, which `resume` runs again


def run_directories(runs_dir: Path) -> list[Path]:
    """Every run's directory, by name (run ids start with their time); shared dot-folders such as .baselines
    are not runs."""
    if not runs_dir.is_dir():
        return []
    return sorted(path for path in runs_dir.iterdir() if path.is_dir() and not path.name.startswith("."))


SUFFIX_STEP = 256


def new_run_id(runs_dir: Path | None = None) -> str:
    """<date>-<time>-<4 hex>. The newest run is the last by name (run_directories), also when two start within one
    second (a night that takes less than a second, then the next): the suffix is drawn above every suffix of that
    second already in `runs_dir`, and a second whose suffixes are used up is waited out."""
    while True:
        second = time.strftime("%Y%m%d-%H%M%S")
        runs = runs_dir.glob(f"{second}-*") if runs_dir is not None else ()
        taken = [int(path.name[-4:], 16) for path in runs if re.fullmatch(RUN_ID_PATTERN, path.name)]
        floor = max(taken, default=-1) + 1
        if floor <= 0xFFFF:
            # A small random step: two runs starting at once in one runs_dir still draw different ids.
            return f"{second}-{floor + secrets.randbelow(min(SUFFIX_STEP, 0x10000 - floor)):04x}"
        time.sleep(1.0 - time.time() % 1.0)


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Path):
        return str(value)
    return repr(value)


def _write_file(path: Path, text: str) -> None:
    """Write-then-rename: a reader (or a crash) never sees half a file."""
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def _write_json_file(path: Path, payload: Any) -> None:
    _write_file(path, json.dumps(payload, indent=2, default=_default, ensure_ascii=False) + "\n")


def _drop_torn_line(transcript: Path) -> None:
    """A kill -9 in the middle of a write leaves a last line without its newline: cut it, so the next event
    starts a line of its own."""
    with transcript.open("rb+") as file:
        data = file.read()
        if data and not data.endswith(b"\n"):
            file.truncate(data.rfind(b"\n") + 1)


class RunJournal:
    def __init__(self, runs_dir: Path, run_id: str, *, resume: bool = False) -> None:
        """A new run's directory, or (resume) the existing one of a run that stopped: its files are added to."""
        self.run_id = run_id
        self.directory = runs_dir / run_id
        if resume:
            _drop_torn_line(self.directory / "transcript.jsonl")
        else:  # the transcript holds the whole repository: readable by the user alone
            private_dir(runs_dir)
            self.directory.mkdir(mode=PRIVATE_MODE)
        self._transcript: TextIO = (self.directory / "transcript.jsonl").open("a", encoding="utf-8")
        self._lock = threading.Lock()  # tasks in parallel (a fleet) write whole lines and whole diffs, never halves

    def write_config(self, config: BaseModel) -> None:
        self.write_json("config.json", config)

    def write_json(self, name: str, record: BaseModel) -> None:
        _write_json_file(self.directory / name, record.model_dump(mode="json"))

    def record(self, event: Event) -> None:
        line = event.model_dump_json() + "\n"
        with self._lock:
            self._transcript.write(line)
            self._transcript.flush()
            os.fsync(self._transcript.fileno())

    def append_patch(self, header: str, diff: bytes, *, total_bytes: int, full_change: str | None) -> None:
        """One file for all tasks; `git apply` skips the header lines between diffs.

        `diff` is at most PATCH_MAX_BYTES of a diff of total_bytes; a cut one says so, and where the whole is
        (`full_change`, a commit) or that it is not kept. Bytes as git wrote them: file contents need not be UTF-8.
        """
        lines = [f"# {header}" if total_bytes else f"# {header}: no changes"]
        if total_bytes > len(diff):
            where = f"the whole change is {full_change}" if full_change else "the rest is not kept (no commit)"
            lines.append(f"# cut: the first {len(diff)} of {total_bytes} bytes of this diff are below; {where}")
        self.append_patch_records("\n".join(lines).encode("utf-8") + b"\n" + (diff + b"\n" if diff else b""))

    def append_patch_records(self, records: bytes) -> None:
        """patch.diff's entries as written, e.g. a Ray worker's for its task."""
        with self._lock, (self.directory / "patch.diff").open("ab") as patch:
            patch.write(records)

    def write_summary(self, summary: RunSummary) -> None:
        """summary.json and the morning reports beside it, always together."""
        _write_json_file(self.directory / "summary.json", summary.model_dump(mode="json"))
        patch = self.directory / "patch.diff"
        diffs = split_patch(patch.read_text(encoding="utf-8", errors="replace")) if patch.exists() else {}
        _write_file(self.directory / "report.md", render_markdown(summary, diffs))
        _write_file(self.directory / "report.html", render_html(summary, diffs))

    def close(self) -> None:
        self._transcript.close()
