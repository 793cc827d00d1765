"""One run per repository: the lock in its git directory, its holder named, a dead holder taken over."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from agent.record.journal import run_directories
from agent.run.lock import LOCK_NAME, LockHeld, RepoLock

from support.cli_runs import cli_command, start_cli, wait_for
from support.repos import checkout_fingerprint, make_repo
from support.scripted_server import Hold, Reply, ScriptedServer


def test_a_second_lock_on_one_repository_names_the_holder(tmp_path: Path) -> None:
    first, second = RepoLock(tmp_path, "run-one"), RepoLock(tmp_path, "run-two")
    first.acquire(Path("/srv/repo"), print)
    with pytest.raises(LockHeld) as held:
        second.acquire(Path("/srv/repo"), print)
    line = str(held.value)
    assert line.startswith("/srv/repo is in use by run run-one (pid ") and "started 20" in line
    first.release()
    second.acquire(Path("/srv/repo"), print)
    assert json.loads((tmp_path / LOCK_NAME).read_text())["run_id"] == "run-two"
    second.release()
    assert not (tmp_path / LOCK_NAME).exists()


def test_different_repositories_lock_independently(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    locks = [RepoLock(tmp_path / "a", "one"), RepoLock(tmp_path / "b", "two")]
    for lock in locks:
        lock.acquire(tmp_path, print)
    assert all(lock.held for lock in locks)


@pytest.mark.parametrize("content", ["dead", "garbage"])
def test_a_dead_or_unreadable_holder_is_taken_over_with_a_log_line(tmp_path: Path, content: str) -> None:
    (tmp_path / LOCK_NAME).write_text(
        json.dumps({"run_id": "old", "owner": f"{socket.gethostname()}:999999999:1", "started_at": "yesterday"})
        if content == "dead"
        else "not json"
    )
    logged: list[str] = []
    lock = RepoLock(tmp_path, "new")
    lock.acquire(Path("/srv/repo"), logged.append)
    assert len(logged) == 1 and logged[0].startswith("taking over the lock on /srv/repo from run ")
    assert json.loads((tmp_path / LOCK_NAME).read_text())["run_id"] == "new"


def test_release_leaves_a_lock_another_run_took_over_alone(tmp_path: Path) -> None:
    lock = RepoLock(tmp_path, "mine")
    lock.acquire(tmp_path, print)
    (tmp_path / LOCK_NAME).write_text(json.dumps({"run_id": "theirs", "owner": "x:1:1", "started_at": "now"}))
    lock.release()
    assert json.loads((tmp_path / LOCK_NAME).read_text())["run_id"] == "theirs"


@pytest.mark.docker
def test_a_second_run_on_the_same_repository_exits_2_naming_the_first(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    with ScriptedServer([Reply(tool_calls=[("bash", {"command": "true"})]), Hold()]) as server:
        first = start_cli(cli_command(repo, server, tmp_path / "runs", "first"), tmp_path / "scratch")
        try:
            wait_for(server.held.is_set, "the first run's second request")
            before = checkout_fingerprint(repo)
            second = start_cli(
                cli_command(repo, server, tmp_path / "runs-2", "second"),
                tmp_path / "scratch",
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            _, errors = second.communicate(timeout=120)
        finally:
            first.kill()
            first.wait(timeout=60)
    (run_dir,) = run_directories(tmp_path / "runs")
    assert second.returncode == 2
    assert errors.decode().startswith(f"error: {repo} is in use by run {run_dir.name} (pid {first.pid} on ")
    assert not (tmp_path / "runs-2").exists() and checkout_fingerprint(repo) == before
