"""`refactor-agent run` end to end: the real CLI, real Docker sandbox, real git, the scripted model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import git
import pytest
from typer.testing import CliRunner

from agent.cli import app

from repos import checkout_fingerprint, make_repo
from scripted_server import Fail, Reply, ScriptedServer

pytestmark = pytest.mark.docker

RENAME_SCRIPT = [
    Reply(tool_calls=[("search", {"pattern": "compute_area"})], reasoning="find every use first"),
    Reply(
        tool_calls=[
            ("str_replace", {"path": "pkg/geometry.py", "old": "def compute_area(", "new": "def area("}),
            (
                "create_file",
                {
                    "path": "pkg/report.py",
                    "content": "from pkg.geometry import area\n\n\ndef describe(width, height):\n"
                    '    return f"area={area(width, height)}"\n',
                },
            ),
            ("bash", {"command": "sed -i 's/compute_area/area/g' tests/test_geometry.py && grep -c area tests/*.py"}),
        ]
    ),
    Reply(tool_calls=[("bash", {"command": "git status --short && git diff --stat"}), ("run_tests", {})]),
    Reply(tool_calls=[("finish", {"summary": "Rename compute_area to area\n\nCallers and tests follow."})]),
]


def read_run(runs_dir: Path) -> tuple[Path, dict, list[dict]]:
    (run_dir,) = [path for path in runs_dir.iterdir() if not path.name.startswith(".")]  # .baselines is shared
    summary = json.loads((run_dir / "summary.json").read_text())
    transcript = [json.loads(line) for line in (run_dir / "transcript.jsonl").read_text().splitlines()]
    return run_dir, summary, transcript


def invoke(repo: Path, server: ScriptedServer, runs_dir: Path, *extra: str) -> int:
    arguments = ["run", str(repo), "--task", "Rename compute_area to area", "--server", server.url]
    result = CliRunner().invoke(app, [*arguments, "--runs-dir", str(runs_dir), "--max-turns", "8", *extra])
    return result.exit_code


def test_rename_across_files_lands_as_one_commit_on_a_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    before = checkout_fingerprint(repo)
    runs_dir = tmp_path / "runs"
    with ScriptedServer(list(RENAME_SCRIPT)) as server:
        done = subprocess.run(
            [
                sys.executable, "-m", "agent", "run", str(repo), "--task", "Rename compute_area to area",
                "--server", server.url, "--runs-dir", str(runs_dir), "--effort", "max",
            ],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert checkout_fingerprint(repo) == before

    run_dir, summary, transcript = read_run(runs_dir)
    (task,) = summary["tasks"]
    assert task["status"] == "committed" and task["turns"] == 4
    user_repo = git.Repo(repo)
    commits = list(user_repo.iter_commits(f"main..{task['branch']}"))
    assert [c.hexsha for c in commits] == [task["commit"]]
    assert sorted(commits[0].stats.files) == ["pkg/geometry.py", "pkg/report.py", "tests/test_geometry.py"]
    assert f"Refactor-Agent-Run: {summary['run_id']}" in commits[0].message
    assert commits[0].message.startswith("Rename compute_area to area")

    test_result = next(e for e in transcript if e["type"] == "tool_result" and e["name"] == "run_tests")
    assert "exit code 0" in test_result["text"] and "2 passed" in test_result["text"]
    assert "def area(" in (run_dir / "patch.diff").read_text()
    git_call = next(e for e in transcript if e["type"] == "tool_call" and "git status" in e["arguments"])
    git_in_sandbox = next(e for e in transcript if e["type"] == "tool_result" and e["id"] == git_call["id"])
    assert "exit code 0" in git_in_sandbox["text"] and "pkg/geometry.py" in git_in_sandbox["text"]
    config = json.loads((run_dir / "config.json").read_text())
    assert config["llm"]["effort"] == "max" and config["llm"]["sampling"]["top_p"] == 0.95
    assert task["metrics"]["cached_tokens"] > 0 and task["metrics"]["latency_p99_s"] is not None
    first_request = next(e for e in transcript if e["type"] == "request")
    system = first_request["new_messages"][0]["content"]
    assert '<file path="pkg/geometry.py">' in system and "def compute_area" in system
    assert all(server.requests[0]["messages"][0] == r["messages"][0] for r in server.requests)


def test_dirty_checkout_is_refused_unless_allowed_and_never_touched(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "pkg/geometry.py").write_text("# work in progress\n")
    before = checkout_fingerprint(repo)
    with ScriptedServer([Reply(tool_calls=[("finish", {"summary": "nothing"})])]) as server:
        assert invoke(repo, server, tmp_path / "runs") == 2
        assert not (tmp_path / "runs").exists()
        assert invoke(repo, server, tmp_path / "runs", "--allow-dirty") == 0
    assert checkout_fingerprint(repo) == before
    _, summary, _ = read_run(tmp_path / "runs")
    assert summary["tasks"][0]["status"] == "no_changes"


@pytest.mark.parametrize(
    ("script", "status", "reason"),
    [
        (
            [
                Reply(tool_calls=[("bash", {"command": "sleep 60", "timeout": 1})]),
                Reply(tool_calls=[("view_file", {"path": "/etc/passwd"})]),
                Reply(tool_calls=[("finish", {"summary": "nothing to do"})]),
            ],
            "no_changes",
            "the model called finish",
        ),
        (
            [
                Reply(tool_calls=[("create_file", {"path": "half.py", "content": "x = 1\n"})]),
                Fail(500, {"error": {"code": 500, "message": "CUDA out of memory", "type": "server_error"}}),
                Fail(500, {"error": {"code": 500, "message": "CUDA out of memory", "type": "server_error"}}),
            ],
            "failed",
            "CUDA out of memory",
        ),
        ([Reply(tool_calls=[("bash", {"command": "true"})])] * 9, "failed", "--max-turns 8"),
    ],
    ids=["timeout-and-escape", "server-500-mid-run", "turn-limit"],
)
def test_failure_paths_end_with_a_status_and_a_complete_transcript(
    tmp_path: Path, script: list, status: str, reason: str
) -> None:
    repo = make_repo(tmp_path / "repo")
    with ScriptedServer(script) as server:
        exit_code = invoke(repo, server, tmp_path / "runs", "--max-retries", "1")
    run_dir, summary, transcript = read_run(tmp_path / "runs")
    (task,) = summary["tasks"]
    assert (task["status"], exit_code) == (status, 1 if status == "failed" else 0)
    assert reason in task["reason"]
    assert transcript[-1]["type"] == "run_end"
    assert any(e["type"] == "task_end" for e in transcript)
    results = [e["text"] for e in transcript if e["type"] == "tool_result"]
    if status == "no_changes":
        assert "timed out after 1s" in results[0]
        assert "outside the workspace" in results[1]
    assert not list(git.Repo(repo).iter_commits(f"main..{task['branch']}"))
    assert (run_dir / "patch.diff").exists()


def test_context_overflow_fails_the_task_with_that_reason(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    with ScriptedServer(n_ctx=200) as server:
        assert invoke(repo, server, tmp_path / "runs") == 1
    _, summary, _ = read_run(tmp_path / "runs")
    assert "exceed_context_size_error" in summary["tasks"][0]["reason"]


def test_two_tasks_share_the_repository_prefix(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    finish = Reply(tool_calls=[("finish", {"summary": "done"})])
    with ScriptedServer([finish, finish]) as server:
        result = CliRunner().invoke(
            app,
            ["run", str(repo), "--task", "first", "--task", "second", "--server", server.url,
             "--runs-dir", str(tmp_path / "runs")],
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    first, second = (request["messages"] for request in server.requests)
    assert first[0] == second[0]
    assert first[1]["content"] != second[1]["content"]
    _, summary, _ = read_run(tmp_path / "runs")
    assert [t["status"] for t in summary["tasks"]] == ["no_changes", "no_changes"]
    assert summary["tasks"][0]["branch"] != summary["tasks"][1]["branch"]
