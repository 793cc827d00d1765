"""`refactor-agent run` with bad input: one line on stderr naming the option, exit code 2, nothing created."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import agent
from agent.cli import app
from agent.protocol.config import LLMConfig, NightConfig, RunConfig
from agent.protocol.records import RunSummary
from agent.run.cli import run_config_of
from agent.settings.options import command_options

from support.repos import checkout_fingerprint, make_repo, refs_of

DEAD_SERVER = "http://127.0.0.1:9/v1"  # never reached: bad input is refused before the preflight


def _snapshot(tmp_path: Path) -> tuple[set[str], dict[str, str], dict[str, str]]:
    """Every path under tmp_path, the user's checkout, and all its refs (task branches too): what a refused run
    must leave alone."""
    repo = tmp_path / "repo"
    files = {path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*") if ".git" not in path.parts}
    return files, checkout_fingerprint(repo), refs_of(repo)


def _refused(tmp_path: Path, options: list[str]) -> str:
    """Runs the CLI on a good repository with `options`; returns its stderr after checking nothing changed."""
    repo = tmp_path / "repo"
    if not repo.exists():
        make_repo(repo)
    before = _snapshot(tmp_path)
    arguments = ["run", str(repo), "--task", "Rename compute_area", "--server", DEAD_SERVER]
    result = CliRunner().invoke(app, [*arguments, "--runs-dir", str(tmp_path / "runs"), *options])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.stdout == ""
    assert _snapshot(tmp_path) == before
    return result.stderr


@pytest.mark.parametrize(
    ("options", "line"),
    [
        (["--temperature", "5"], "--temperature 5.0: input should be less than or equal to 2"),
        (["--top-p", "0"], "--top-p 0.0: input should be greater than 0"),
        (["--min-p", "1.5"], "--min-p 1.5: input should be less than or equal to 1"),
        (["--command-timeout", "-1"], "--command-timeout -1.0: input should be greater than 0"),
        (["--idle-timeout", "0"], "--idle-timeout 0.0: input should be greater than 0"),
        (["--max-turns", "0"], "--max-turns 0: input should be greater than or equal to 1"),
        (["--max-retries", "-1"], "--max-retries -1: input should be greater than or equal to 0"),
        (["--max-tokens", "0"], "--max-tokens 0: input should be greater than or equal to 1"),
        (["--server", "http://[::1"], "--server http://[::1: not a URL (Invalid IPv6 URL)"),
        (
            ["--server", "localhost:8080"],
            "--server localhost:8080: not an http(s) URL with a host, e.g. http://127.0.0.1:8080/v1",
        ),
        (["--server", DEAD_SERVER], f"--server {[DEAD_SERVER, DEAD_SERVER]}: {DEAD_SERVER} is named twice"),
        (["--address", "127.0.0.1:6379"], "--address: only with --executor ray"),
    ],
)
def test_an_out_of_range_value_is_one_line_naming_the_option(tmp_path: Path, options: list[str], line: str) -> None:
    assert _refused(tmp_path, options) == f"error: {line}\n"


def test_a_task_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    task_file = tmp_path / "tasks.txt"
    task_file.write_bytes(b"Rename caf\xe9 to cafe\n")
    stderr = _refused(tmp_path, ["--task-file", str(task_file)])
    assert stderr == f"error: --task-file {task_file}: not UTF-8 text (byte 10)\n"


def test_a_task_file_that_is_a_directory_or_missing_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    stderr = _refused(tmp_path, ["--task-file", str(tmp_path / "tasks")])
    assert stderr == f"error: --task-file {tmp_path / 'tasks'}: cannot read it: Is a directory\n"
    missing = tmp_path / "missing.txt"
    stderr = _refused(tmp_path, ["--task-file", str(missing)])
    assert stderr == f"error: --task-file {missing}: cannot read it: No such file or directory\n"


def test_a_runs_dir_that_is_a_file_or_below_one_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    for runs_dir in (blocker, blocker / "runs"):
        stderr = _refused(tmp_path, ["--runs-dir", str(runs_dir)])
        assert stderr == f"error: --runs-dir {runs_dir}: {blocker} is not a directory\n"


def test_an_unwritable_runs_dir_is_one_line(tmp_path: Path) -> None:
    # /proc takes no new files for anyone, root included: the check does not depend on who runs the test.
    stderr = _refused(tmp_path, ["--runs-dir", "/proc/refactor-agent-runs"])
    assert stderr.startswith("error: --runs-dir /proc/refactor-agent-runs: cannot write in /proc: ")
    assert stderr.count("\n") == 1
    assert not Path("/proc/refactor-agent-runs").exists()


def test_the_installed_command_refuses_a_non_utf8_task_file_without_a_traceback(tmp_path: Path) -> None:
    """The real process, as cron runs it: stderr is exactly one line, the exit code 2."""
    repo = make_repo(tmp_path / "repo")
    task_file = tmp_path / "tasks.txt"
    task_file.write_bytes(b"\xff\xfe not text\n")
    source_root = str(Path(agent.__file__).resolve().parents[1])
    completed = subprocess.run(
        [sys.executable, "-m", "agent", "run", str(repo), "--task-file", str(task_file), "--server", DEAD_SERVER],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": source_root},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 2
    assert completed.stderr == f"error: --task-file {task_file}: not UTF-8 text (byte 0)\n"
    assert not (tmp_path / "runs").exists()


def test_the_feature_switches_take_on_or_off(tmp_path: Path) -> None:
    assert _refused(tmp_path, ["--symbol-tools", "maybe"]) == "error: --symbol-tools: 'maybe' is not one of on, off\n"
    options = {option.name: option.default for option in command_options("eval")}
    config = run_config_of(tmp_path, ["Rename x"], {**options, "symbol_tools": "off", "runs_dir": tmp_path / "runs"})
    assert (config.symbol_tools, config.ledger) == (False, True)


def test_a_runs_dir_inside_the_repository_is_one_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    stderr = _refused(tmp_path, ["--runs-dir", str(repo / "records")])
    assert stderr == (
        f"error: --runs-dir {repo}/records: inside {repo}, a repository this run works on (its records hold the "
        "whole repository and would leave the checkout dirty): choose a directory outside it\n"
    )


def test_resume_with_a_new_deadline_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """`resume --deadline` reads the end time like `run` does; the preflight's refusal is then its one line."""
    repo = make_repo(tmp_path / "repo")
    night = NightConfig(repos=[RunConfig(repo=repo, tasks=["x"], llm=LLMConfig(server_url=DEAD_SERVER))])
    run_dir = tmp_path / "runs" / "20261201-010000-abcd"
    run_dir.mkdir(parents=True)
    (run_dir / "night.json").write_text(night.model_dump_json())
    summary = RunSummary(run_id=run_dir.name, repo=str(repo), model="m", server_url=DEAD_SERVER)
    (run_dir / "summary.json").write_text(summary.model_dump_json())
    options = ["--runs-dir", str(tmp_path / "runs"), "--deadline", "2h", "--server", DEAD_SERVER]
    result = CliRunner().invoke(app, ["resume", run_dir.name, *options])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
