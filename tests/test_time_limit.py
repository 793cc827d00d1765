"""The night's deadline and a task's time limit: a model that never finishes is told time is up, then stopped; its
work is kept, later tasks are skipped, and the process ends soon after the deadline whatever the server does."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import git
import pytest

from agent.config import RunConfig
from agent.journal import run_directories
from agent.time_limit import TIME_UP_MESSAGE, TimeUp, grace_start, time_limit

from cli_runs import cli_command, start_cli
from repos import make_repo
from scripted_model import ScriptedModel, run_in_process
from scripted_server import Hold, Reply, ScriptedServer


def test_the_limit_raises_in_the_main_thread_and_is_cleared_on_the_way_out() -> None:
    with pytest.raises(TimeUp, match="deadline"), time_limit(time.time() + 0.2, "deadline"):
        time.sleep(30)  # a blocking call is cut short
    with time_limit(time.time() + 0.2, "deadline"):
        pass
    time.sleep(0.4)  # no late alarm once the block is left


def test_the_grace_period_is_at_most_a_quarter_of_the_time() -> None:
    assert grace_start(0, 40) == 30
    assert grace_start(0, 7200) == 7200 - 300


@pytest.mark.docker
def test_a_model_that_never_finishes_is_told_then_stopped_at_the_deadline(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    runs_dir = tmp_path / "runs"
    script = [
        Reply(tool_calls=[("create_file", {"path": "pkg/half.py", "content": "HALF = 1\n"})]),
        Reply(tool_calls=[("bash", {"command": "sleep 45"})]),  # still running when the grace period starts
        Hold(),  # the server never answers again
    ]
    with ScriptedServer(script) as server:
        command = [*cli_command(repo, server, runs_dir, "first", "second"), "--deadline", "60s"]
        process = start_cli([*command, "--min-task-time", "10s"], tmp_path / "scratch", stdout=subprocess.DEVNULL)
        try:
            exit_code = process.wait(timeout=180)  # ends instead of waiting on the held request forever
        finally:
            process.kill()
        requests = list(server.requests)
    assert exit_code == 1
    told = [m for m in requests[-1]["messages"] if m.get("content") == TIME_UP_MESSAGE]
    assert len(told) == 1 and requests[-1]["messages"][-1]["content"] == TIME_UP_MESSAGE  # appended, once
    (run_dir,) = run_directories(runs_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    first, second = summary["tasks"]
    assert (first["status"], second["status"]) == ("timed_out", "skipped")
    assert summary["wall_time_s"] < 60 + 60  # the deadline, then at most a minute to settle
    assert second["reason"].startswith("deadline: ")
    (commit,) = git.Repo(repo).iter_commits(f"main..{first['branch']}")
    assert list(commit.stats.files) == ["pkg/half.py"]
    assert "Refactor-Agent-Status: timed_out" in commit.message.splitlines()
    assert "+HALF = 1" in (run_dir / "patch.diff").read_text()


@pytest.mark.docker
def test_a_task_over_its_time_limit_is_timed_out_and_the_next_one_runs(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    config = RunConfig(repo=repo, tasks=["slow", "quick"], runs_dir=tmp_path / "runs", task_timeout_s=15)
    script = [
        Reply(tool_calls=[("create_file", {"path": "pkg/slow.py", "content": "SLOW = 1\n"})]),
        Reply(tool_calls=[("bash", {"command": "sleep 120"})]),  # cut off by the task's limit
        Reply(tool_calls=[("create_file", {"path": "pkg/quick.py", "content": "QUICK = 1\n"})]),
        Reply(tool_calls=[("finish", {"summary": "Add quick"})]),
    ]
    summary = run_in_process(config, ScriptedModel(script))
    slow, quick = summary.tasks
    assert (slow.status, quick.status) == ("timed_out", "committed")
    assert slow.reason.startswith("--task-timeout 15s: stopped at ")
    (commit,) = git.Repo(repo).iter_commits(f"main..{slow.branch}")
    assert list(commit.stats.files) == ["pkg/slow.py"]
