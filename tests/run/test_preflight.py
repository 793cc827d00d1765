"""Bad input: one line, exit code 2, nothing created, nothing touched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.protocol.config import RunConfig
from agent.run.preflight import PreflightError, preflight
from agent.run.sandboxes import DockerSandboxes

from support.repos import checkout_fingerprint, git, make_repo
from support.scripted_server import ScriptedServer


def run_cli(*arguments: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["run", *arguments], env=env)
    return result.exit_code, result.output


def test_not_a_repository(tmp_path: Path) -> None:
    target = tmp_path / "folder"
    target.mkdir()
    code, output = run_cli(str(target), "--task", "x", "--runs-dir", str(tmp_path / "runs"))
    assert code == 2
    assert output.strip() == f"error: {target} is not a git repository (run `git init` and commit first)"
    assert not (tmp_path / "runs").exists()


def test_repository_without_commits(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    code, output = run_cli(str(tmp_path), "--task", "x")
    assert code == 2 and "has no commits yet" in output


def test_no_task_is_a_usage_error(tmp_path: Path) -> None:
    code, output = run_cli(str(make_repo(tmp_path / "repo")))
    assert code == 2 and "give at least one --task" in output


def test_task_file_paragraphs(tmp_path: Path) -> None:
    from agent.run.cli import _read_tasks

    tasks = tmp_path / "tasks.txt"
    tasks.write_text("# nightly\nRename foo\nto bar.\n\n\nDrop Python 2 shims\n")
    assert _read_tasks(["inline"], tasks) == ["inline", "Rename foo\nto bar.", "Drop Python 2 shims"]


@pytest.mark.docker
def test_explicit_server_that_is_down(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    before = checkout_fingerprint(repo)
    code, output = run_cli(str(repo), "--task", "x", "--server", "http://127.0.0.1:9/v1")
    assert code == 2
    assert output.startswith("error: no llama-server answers at http://127.0.0.1:9: start one with")
    assert len(output.strip().splitlines()) == 1
    assert checkout_fingerprint(repo) == before


@pytest.mark.docker
def test_parallel_beyond_the_servers_slots_is_one_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    with ScriptedServer() as server:
        code, output = run_cli(
            str(repo), "--task", "x", "--server", server.url, "--parallel", "2", "--runs-dir", str(tmp_path / "runs")
        )
    assert code == 2
    assert output.startswith(f"error: --parallel 2 needs 2 slots, but the llama-server at {server.root} has 1")
    assert len(output.strip().splitlines()) == 1 and not (tmp_path / "runs").exists()


def test_docker_daemon_unreachable(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    code, output = run_cli(
        str(repo), "--task", "x", "--server", "http://127.0.0.1:9/v1", env={"DOCKER_HOST": "unix:///nonexistent.sock"}
    )
    assert code == 2 and output.startswith("error: Docker daemon unreachable")


@pytest.mark.docker
def test_missing_image_says_how_to_build_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    code, output = run_cli(str(repo), "--task", "x", "--image", "no-such-image:1")
    assert code == 2 and "refactor-agent sandbox build" in output


@pytest.mark.parametrize("state", ["clean", "dirty"])
def test_the_dirty_check_never_writes_the_users_index(
    tmp_path: Path, state: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Touched mtimes make git want to refresh the index's stat data; the check must only read."""
    repo = make_repo(tmp_path / "repo")
    if state == "dirty":
        (repo / "pkg/geometry.py").write_text("# edited\n")
        (repo / "notes.txt").write_text("untracked\n")
    for file in repo.rglob("*.py"):
        os.utime(file, (1_000_000, 1_000_000))
    index = repo / ".git" / "index"
    before = (index.read_bytes(), index.stat().st_mtime_ns)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")  # the first check after the dirty one fails
    config = RunConfig(repo=repo, tasks=["x"])
    with pytest.raises(PreflightError) as raised:
        preflight(config, sandboxes=DockerSandboxes(), allow_dirty=False, log=lambda _: None)
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before
    if state == "dirty":
        assert "uncommitted changes (1 changed and 1 untracked paths)" in str(raised.value)
    else:
        assert str(raised.value).startswith("Docker daemon unreachable")
