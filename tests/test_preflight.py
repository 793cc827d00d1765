"""Bad input: one line, exit code 2, nothing created, nothing touched."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app

from repos import checkout_fingerprint, git, make_repo


def run_cli(*arguments: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["run", *arguments], env=env)
    return result.exit_code, result.output


def test_not_a_repository(tmp_path: Path) -> None:
    code, output = run_cli(str(tmp_path), "--task", "x", "--runs-dir", str(tmp_path / "runs"))
    assert code == 2
    assert output.strip() == f"error: {tmp_path} is not a git repository (run `git init` and commit first)"
    assert not (tmp_path / "runs").exists()


def test_repository_without_commits(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    code, output = run_cli(str(tmp_path), "--task", "x")
    assert code == 2 and "has no commits yet" in output


def test_no_task_is_a_usage_error(tmp_path: Path) -> None:
    code, output = run_cli(str(make_repo(tmp_path / "repo")))
    assert code == 2 and "give at least one --task" in output


def test_task_file_paragraphs(tmp_path: Path) -> None:
    from agent.cli import _read_tasks

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
