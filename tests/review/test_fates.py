"""`review fates` and `review discard` of a named night's task: the record says what became of each task (its
fate, nights open) and the merge rate per kind; a task discarded in review is recorded so the next night skips it;
`review RUN` shows where the night's branches stand now. Bad input: a missing record is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.nights.fates import record_of
from agent.protocol.nights import Fingerprint, TaskRecord, TaskRecordFile
from agent.review.repository import user_repository

from support.nights import T1, T3, after_first_night, first_night
from support.repos import git, make_repo

RENAME = "refactor-agent/nightly/rename-compute-area-to-area"
UNITS = "refactor-agent/nightly/add-a-units-module"


def _review(*arguments: str, code: int = 0) -> str:
    result = CliRunner().invoke(app, ["review", *arguments])
    assert result.exit_code == code, (result.output, result.exception)
    return result.stdout if code == 0 else result.stderr


def _latest_run(runs: Path) -> str:
    return sorted(path.name for path in runs.iterdir() if not path.name.startswith("."))[-1]


@pytest.mark.started_at_collection(first_night((T1, T3)))
def test_a_task_discarded_in_review_is_recorded_and_the_next_night_skips_it(monkeypatch: pytest.MonkeyPatch) -> None:
    fixture = after_first_night(monkeypatch, (T1, T3))  # asserted to succeed
    night_1 = _latest_run(fixture.runs)
    runs = ("--runs-dir", str(fixture.runs))

    said = json.loads(_review("discard", f"{night_1}/1", "--yes", "--json", *runs))
    assert said == {"deleted": [RENAME], "kept": {}, "recorded_discarded": [RENAME]}
    assert sorted(fixture.branches()) == [UNITS]  # task 2's branch is not touched
    (discarded,) = [task for task in fixture.record()["tasks"].values() if task["text"] == T1]
    assert discarded["fate"] == "discarded" and discarded["discarded_at"] is not None
    assert fixture.record()["written_by"] == "review discard"

    (fixture.repo / "NOTES").write_text("main moves on\n")
    git(fixture.repo, "add", "NOTES")
    git(fixture.repo, "commit", "-q", "-m", "Notes")
    second = fixture.night(tasks=(T1, T3))
    assert second.exit_code == 0, second.output
    assert not second.asked(T1) and not second.asked(T3)  # skipped; rebased without the model
    assert f"skip    {RENAME}  discarded by review discard on {discarded['discarded_at'][:10]}" in second.output

    monkeypatch.chdir(fixture.repo)
    table = json.loads(_review("fates", "--json", *runs))
    assert [(row["branch"], row["fate"], row["nights_open"]) for row in table["tasks"]] == [
        (RENAME, "discarded", 1),
        (UNITS, "waiting", 2),
    ]
    assert table["kinds"] == [
        {"kind": "rename", "merged": 0, "discarded": 1, "waiting": 0, "merge_rate": 0.0},
        {"kind": "other", "merged": 0, "discarded": 0, "waiting": 1, "merge_rate": None},
    ]
    # Night 1's run, reviewed the morning after night 2: its branches as they are now.
    shown = _review(night_1, *runs).splitlines()
    assert [line.split(maxsplit=1) for line in shown[shown.index("branches now:") + 1 :]] == [
        [RENAME, "deleted"],
        [UNITS, "moved by a later night's rebase"],
    ]
    assert [row["branch state"] for row in json.loads(_review(night_1, "--json", *runs))["rows"]] == [
        "deleted",
        "moved by a later night's rebase",
    ]


def test_review_fates_without_a_record_is_one_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (tmp_path / "runs").mkdir()
    said = _review("fates", "--repo", str(repo), "--runs-dir", str(tmp_path / "runs"), code=2)
    assert said.startswith("error: no task record at ") and said.endswith(
        ": no named night has run on this repository\n"
    )
    assert said.count("\n") == 1


def test_review_fates_shows_the_records_text_escaped(tmp_path: Path) -> None:
    """The record's words come from the night file and the repository: shown, never obeyed by the terminal."""
    repo = make_repo(tmp_path / "repo")
    runs = tmp_path / "runs"
    with user_repository(repo) as repository:
        path = record_of(runs, repository.repo)
    task = TaskRecord(
        key="nightly/t-1",
        text="Rename x",
        kind="rename\x1b]52;c;cGF5bG9hZA==\x07",
        branch="refactor-agent/nightly/x\u202e",
        fingerprint=Fingerprint(model="m", effort="max"),
        fate="merged",
        first_run="r1",
        last_run="r1",
    )
    path.parent.mkdir(parents=True)
    record = TaskRecordFile(work_tree=str(repo), git_dir=str(repo / ".git"), tasks={task.key: task}, written_by="r1")
    path.write_text(record.model_dump_json())
    shown = _review("fates", "--repo", str(repo), "--runs-dir", str(runs))
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert "rename\\x1b]52;c;cGF5bG9hZA==\\x07: 1 merged, 0 discarded, 0 waiting; merge rate 100%" in shown
    assert "refactor-agent/nightly/x\\u202e" in shown
