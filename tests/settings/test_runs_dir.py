"""Where reading commands find the records: `review` inside a repository finds the runs its last runs wrote (a
night file's runs_dir) without --runs-dir; when nothing is found, one line says where it looked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.protocol.records import RunSummary, TaskSummary
from agent.record.journal import RunJournal
from agent.record.last_runs import MAX_STATE_BYTES, remember, remembered, state_file

from support.repos import make_repo

RUN_ID = "20261202-010000-abcd"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's state in tmp: what the runs remembered is the test's alone."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def _night(home: Path) -> tuple[Path, Path]:
    """A repository whose night wrote its records into a folder of the night file's choosing."""
    repo = make_repo(home / "repo")
    (repo / "pkg" / "deep").mkdir(parents=True, exist_ok=True)
    runs_dir = home / "nights" / "records"
    journal = RunJournal(runs_dir, RUN_ID)
    task = TaskSummary(index=1, task="Rename x", repo=str(repo), status="no_changes", verdict="no_changes", reason="r")
    journal.write_summary(RunSummary(run_id=RUN_ID, repo=str(repo), model="m", server_url="u", tasks=[task]))
    journal.close()
    remember([repo], runs_dir)
    return repo, runs_dir


def _review(cwd: Path, *arguments: str):
    previous = Path.cwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(app, ["review", *arguments])
    finally:
        os.chdir(previous)


def test_review_in_a_repository_finds_its_last_runs_without_runs_dir(home: Path) -> None:
    repo, runs_dir = _night(home)
    inside = repo / "pkg" / "deep"
    listed = _review(inside)
    assert listed.exit_code == 0 and listed.stdout.startswith(RUN_ID), listed.output
    shown = _review(inside, RUN_ID)
    assert shown.exit_code == 0 and "Rename x" in shown.stdout, shown.output
    task = _review(inside, "show", f"{RUN_ID}/1")
    assert task.exit_code == 0 and "no_changes" in task.stdout, task.output
    elsewhere = _review(home, RUN_ID)  # outside any repository: a named run is found where any run wrote
    assert elsewhere.exit_code == 0 and "Rename x" in elsewhere.stdout, elsewhere.output
    assert remembered() == {str(repo.resolve()): [str(runs_dir.absolute())]}
    assert state_file().stat().st_mode & 0o077 == 0, "the user's alone"


def test_review_says_where_to_look_when_it_finds_no_runs(home: Path) -> None:
    repo = make_repo(home / "bare")
    result = _review(repo)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"error: no runs found for {repo.resolve()}: none remembered in {state_file()}, no ./runs, none in "
        f"{home / 'state' / 'refactor-agent' / 'runs'}; pass --runs-dir DIR (a night file's runs_dir)\n"
    )


def test_the_remembered_runs_are_bounded_and_a_broken_file_is_no_error(home: Path) -> None:
    repo = make_repo(home / "repo")
    for night in range(8):
        remember([repo], home / f"runs-{night}")
    assert remembered()[str(repo.resolve())] == [str(home / f"runs-{night}") for night in (7, 6, 5, 4, 3)]
    state_file().write_text("[not json")
    assert remembered() == {}
    state_file().write_bytes(b" " * (MAX_STATE_BYTES + 1))
    assert remembered() == {}
    remember([repo], home / "runs-9")
    assert remembered() == {str(repo.resolve()): [str(home / "runs-9")]}
