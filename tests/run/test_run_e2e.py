"""`refactor-agent run` end to end: the real CLI, real Docker sandbox, real git, the scripted model; and a tiny real
model (SmolLM2-135M on a real llama-server, marker `llama_server`), whose behaviour must not break a run either."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import docker
import git
import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.conversation.compaction import trim
from agent.protocol.config import LLMConfig, SamplingConfig
from agent.protocol.events import parse_event
from agent.protocol.records import TaskSummary
from agent.record.journal import run_directories
from agent.record.live import task_end_line
from agent.record.metrics import percentile
from agent.record.reasons import reason_line
from agent.server.chat import OpenAIChatModel
from agent.server.launcher import ServerState
from agent.server.presets import EMBEDDED_REPLY_TOKENS
from sandbox import DEFAULT_IMAGE

from support.cli_runs import (
    AGENT,
    cli_command,
    read_run,
    run_containers,
    start_cli,
    transcript_of,
    wait_for,
    worktrees,
)
from support.killed_runs import FINISH, THREE_STEPS, killed_run, resume, wip_refs
from support.repos import checkout_fingerprint, make_repo
from support.scripted_server import (
    Fail,
    Hold,
    Reply,
    ScriptedServer,
    asks_for_a_summary,
    common_prefix,
    rendered_prompt,
    tokens_of,
)

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


SERVED = "DeepSeek-V4-Flash-0731-UD-IQ3_XXS"


def invoke(repo: Path, server: ScriptedServer, runs_dir: Path, *extra: str) -> int:
    arguments = ["run", str(repo), "--task", "Rename compute_area to area", "--server", server.url]
    result = CliRunner().invoke(app, [*arguments, "--runs-dir", str(runs_dir), "--max-turns", "8", *extra])
    return result.exit_code


def test_rename_across_files_lands_as_one_commit_on_a_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    before = checkout_fingerprint(repo)
    runs_dir = tmp_path / "runs"
    with ScriptedServer(list(RENAME_SCRIPT), model_path=f"/models/{SERVED}-00001-of-00003.gguf") as server:
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
    # The model the server runs (its /props), the name the run asked for beside it.
    assert f"Refactor-Agent-Model: {SERVED}" in commits[0].message.splitlines()
    assert f"Refactor-Agent-Model-Requested: {LLMConfig().model}" in commits[0].message.splitlines()
    assert summary["served_model"] == task["model"] == SERVED and summary["model"] == LLMConfig().model
    # `git log` and blame say whose change it is: the agent and its model wrote it, the user committed it.
    assert (commits[0].author.name, commits[0].author.email) == (
        f"refactor-agent ({SERVED})",
        "refactor-agent@localhost",
    )
    assert (commits[0].committer.name, commits[0].committer.email) == ("Dev", "dev@example.com")
    assert commits[0].message.startswith("Rename compute_area to area")
    # The end block: the tally, the report as a link, the command that reviews the run.
    assert done.stdout.splitlines()[-3:] == [
        f"run {summary['run_id']}: 1 verified",
        f"report: {(run_dir / 'report.html').absolute().as_uri()}",
        f"next: refactor-agent review {summary['run_id']}",  # found where the run wrote (last-runs.json)
    ]

    test_result = next(e for e in transcript if e["type"] == "tool_result" and e["name"] == "run_tests")
    assert "exit code 0" in test_result["text"] and "2 passed" in test_result["text"]
    assert "def area(" in (run_dir / "patch.diff").read_text()
    git_call = next(e for e in transcript if e["type"] == "tool_call" and "git status" in e["arguments"])
    git_in_sandbox = next(e for e in transcript if e["type"] == "tool_result" and e["id"] == git_call["id"])
    assert "exit code 0" in git_in_sandbox["text"] and "pkg/geometry.py" in git_in_sandbox["text"]
    config = json.loads((run_dir / "config.json").read_text())
    assert config["llm"]["effort"] == "max" and config["llm"]["sampling"]["top_p"] == 0.95
    # The scripted server's numbers are known: 4 characters a token, cache = prefix shared with the last request.
    prompts = server.prompts
    prompt_tokens = sum(tokens_of(prompt) for prompt in prompts)
    previous = ["", *prompts[:-1]]
    cached = sum(tokens_of(now[: common_prefix(now, before)]) for before, now in zip(previous, prompts, strict=True))
    metrics = task["metrics"]
    assert (metrics["requests"], metrics["prompt_tokens"], metrics["cached_tokens"]) == (4, prompt_tokens, cached)
    assert metrics["cache_hit_ratio"] == pytest.approx(cached / prompt_tokens)
    assert metrics["cache_hit_ratio"] > 0.5  # every turn after the first reuses the repository prefix
    latencies = [e["stats"]["latency_s"] for e in transcript if e["type"] == "response"]
    assert metrics["latency_p50_s"] == pytest.approx(percentile(latencies, 50))
    assert metrics["latency_p99_s"] == pytest.approx(percentile(latencies, 99))
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


def test_a_run_from_inside_the_repository_reads_none_of_its_config_and_keeps_its_records_out(tmp_path: Path) -> None:
    """`cd repo && refactor-agent run .`: the committed refactor-agent.toml is the repository's, not the user's
    (its on_finish would run on the host); the records go to the user's folder, so the next run finds the checkout
    as clean as before; a --config FILE of the user's own is read."""
    repo = make_repo(tmp_path / "repo")
    marker, mine_ran = tmp_path / "repository-command-ran", tmp_path / "my-command-ran"
    (repo / "refactor-agent.toml").write_text(
        f'on_finish = "touch {marker}"\nallow_dirty = true\ntest_cmd = "true"\nmax_turns = 1\n'
    )
    git.Repo(repo).index.add(["refactor-agent.toml"])
    git.Repo(repo).index.commit("settings of the repository's")
    before = checkout_fingerprint(repo)
    mine = tmp_path / "mine.toml"
    mine.write_text(f'on_finish = "touch {mine_ran}"\n')
    source_root = str(Path(__file__).resolve().parents[2])
    environment = {
        **os.environ, "PYTHONPATH": source_root, "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "no-config"), "TMPDIR": str(tmp_path),
    }  # fmt: skip
    for extra in ([], ["--config", str(mine)]):
        with ScriptedServer([Reply(tool_calls=[("finish", {"summary": "nothing to do"})])]) as server:
            done = subprocess.run(
                [sys.executable, "-m", "agent", "run", ".", "--task", "Look around", "--server", server.url, *extra],
                cwd=repo, env=environment, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"note: {repo}/refactor-agent.toml is not read: it lies inside {repo}" in done.stdout
        runs = tmp_path / "state" / "refactor-agent" / "runs"
        assert f"note: runs here would be inside {repo}, a repository this run works on: run records go to {runs}" in (
            done.stdout
        )
    assert not marker.exists() and mine_ran.exists()
    assert checkout_fingerprint(repo) == before and not (repo / "runs").exists()
    records = run_directories(runs)
    assert len(records) == 2 and stat.S_IMODE(runs.stat().st_mode) == 0o700
    config = json.loads((records[0] / "config.json").read_text())
    assert (config["test_cmd"], config["max_turns"]) == (None, 100)
    assert json.loads((records[0] / "night.json").read_text())["allow_dirty"] is False


@pytest.mark.parametrize(
    ("script", "status", "reason", "kept"),
    [
        (
            [
                Reply(tool_calls=[("bash", {"command": "sleep 60", "timeout": 1})]),
                Reply(tool_calls=[("view_file", {"path": "/etc/passwd"})]),
                Reply(tool_calls=[("finish", {"summary": "nothing to do"})]),
                # The ledger reminds once that compute_area is still there; finishing again is accepted.
                Reply(tool_calls=[("finish", {"summary": "nothing to do"})]),
            ],
            "no_changes",
            "the model called finish",
            "",
        ),
        (
            [
                Reply(tool_calls=[("create_file", {"path": "half.py", "content": "x = 1\n"})]),
                Fail(500, {"error": {"code": 500, "message": "CUDA out of memory", "type": "server_error"}}),
                Fail(500, {"error": {"code": 500, "message": "CUDA out of memory", "type": "server_error"}}),
            ],
            "failed",
            "CUDA out of memory",
            "--- /dev/null\n+++ b/half.py\n@@ -0,0 +1 @@\n+x = 1\n",
        ),
        ([Reply(tool_calls=[("bash", {"command": "true"})])] * 9, "failed", "--max-turns 8", ""),
    ],
    ids=["timeout-and-escape", "server-500-mid-run", "turn-limit"],
)
def test_failure_paths_end_with_a_status_and_a_complete_transcript(
    tmp_path: Path, script: list, status: str, reason: str, kept: str
) -> None:
    repo = make_repo(tmp_path / "repo")
    before = checkout_fingerprint(repo)
    with ScriptedServer(script) as server:
        exit_code = invoke(repo, server, tmp_path / "runs", "--max-retries", "1")
    assert checkout_fingerprint(repo) == before
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
    started = next(e["branch"] for e in transcript if e["type"] == "task_start")
    assert task["branch"] is None and started not in [head.name for head in git.Repo(repo).heads], "no branch left"
    patch = (run_dir / "patch.diff").read_text()
    assert kept in patch  # a failed task's work is kept for the morning


def test_links_out_of_the_repository_keep_the_run_going_and_stay_links(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "config").symlink_to("/etc/passwd")  # absolute links are common: /usr/share/..., a system config
    (repo / "pkg/shared").symlink_to("../../outside")
    (repo / "docs").symlink_to(repo / "pkg")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "links"], cwd=repo, check=True)
    before = checkout_fingerprint(repo)
    script = [
        Reply(tool_calls=[("create_file", {"path": "pkg/extra.py", "content": "VALUE = 2\n"})]),
        Reply(tool_calls=[("finish", {"summary": "Add pkg.extra"})]),
    ]
    with ScriptedServer(script) as server:
        done = subprocess.run(
            cli_command(repo, server, tmp_path / "runs", "Add pkg.extra"), capture_output=True, text=True, timeout=600
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and checkout_fingerprint(repo) == before
    _, summary, _ = read_run(tmp_path / "runs")
    assert summary["status"] == "completed" and summary["environments"][0]["status"] != "failed"
    (task,) = summary["tasks"]
    assert task["status"] == "committed"
    listing = subprocess.run(["git", "ls-tree", "-r", task["commit"]], cwd=repo, capture_output=True, text=True)
    links = {line.split("\t")[1] for line in listing.stdout.splitlines() if line.startswith("120000")}
    assert links == {"config", "pkg/shared", "docs"}


def test_a_run_that_fails_before_its_tasks_says_failed_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(*_arguments: object, **_options: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("agent.run.sandboxes.prepare_environment", disk_full)
    repo = make_repo(tmp_path / "repo")
    with ScriptedServer([Reply(tool_calls=[("finish", {"summary": "nothing"})])]) as server:
        result = CliRunner().invoke(
            app, ["run", str(repo), "--task", "Anything", "--server", server.url, "--runs-dir", str(tmp_path / "runs")]
        )
    assert result.exit_code == 1, result.output
    _, summary, transcript = read_run(tmp_path / "runs")
    assert summary["status"] == "failed" and summary["tasks"] == []
    assert summary["error"] == "OSError: [Errno 28] No space left on device"
    assert f"run failed: {summary['error']}" in result.output
    assert transcript[-1]["type"] == "run_end" and transcript[-1]["status"] == "failed"
    assert "Traceback" not in result.output


def test_a_sandbox_container_removed_mid_task_is_replaced_and_the_task_goes_on(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    runs_dir = tmp_path / "runs"
    removed: list[str] = []

    def task_container() -> docker.models.containers.Container:
        (run_dir,) = run_directories(runs_dir)
        (container,) = run_containers(run_dir.name)  # found by the run's label, as an operator's script would
        return container

    def remove(container: docker.models.containers.Container) -> None:
        removed.append(container.id)
        container.remove(force=True, v=True)

    def remove_while_sleeping() -> None:
        def watch() -> None:
            container = task_container()
            # "sleep 60", not "sleep": the container's own process is `sleep infinity`, there before the command.
            wait_for(lambda: "sleep 60" in json.dumps(container.top()), "the command to start")
            remove(container)

        threading.Thread(target=watch, daemon=True).start()

    script = [
        Reply(tool_calls=[("bash", {"command": "sleep 60; echo late"})], before=remove_while_sleeping),
        # Between two calls too: the next one finds no container at all.
        Reply(
            tool_calls=[("create_file", {"path": "pkg/extra.py", "content": "VALUE = 2\n"})],
            before=lambda: remove(task_container()),
        ),
        Reply(tool_calls=[("bash", {"command": "cat pkg/extra.py"})]),
        Reply(tool_calls=[("finish", {"summary": "Add pkg.extra"})]),
    ]
    with ScriptedServer(script) as server:
        done = subprocess.run(
            cli_command(repo, server, runs_dir, "Add pkg.extra"), capture_output=True, text=True, timeout=600
        )
    assert done.returncode == 0, done.stdout + done.stderr
    _, summary, transcript = read_run(runs_dir)
    (task,) = summary["tasks"]
    assert task["status"] == "committed" and len(removed) == 2
    results = [event["text"] for event in transcript if event["type"] == "tool_result"]
    assert "the sandbox container was removed" in results[0] and "late" not in results[0]
    assert not results[1].startswith("error") and "VALUE = 2" in results[2]
    assert run_containers(summary["run_id"]) == []


def test_a_sandbox_that_cannot_be_replaced_fails_the_task_naming_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    runs_dir = tmp_path / "runs"
    client = docker.from_env()
    tag = f"refactor-agent-test-gone-{secrets.token_hex(4)}:latest"  # a tag of our own on the shared image
    client.images.get(DEFAULT_IMAGE).tag(tag)

    def remove_container_and_image() -> None:
        (run_dir,) = run_directories(runs_dir)
        (container,) = run_containers(run_dir.name)
        container.remove(force=True, v=True)
        client.images.remove(tag)  # only our tag goes: no fresh sandbox can be made from it now

    script = [
        Reply(tool_calls=[("create_file", {"path": "pkg/extra.py", "content": "VALUE = 2\n"})]),
        Reply(tool_calls=[("bash", {"command": "true"})], before=remove_container_and_image),
        Reply(tool_calls=[("finish", {"summary": "Add pkg.extra"})]),
    ]
    try:
        with ScriptedServer(script) as server:
            command = [*cli_command(repo, server, runs_dir, "Add pkg.extra"), "--image", tag]
            done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(tag)
    assert done.returncode == 1, done.stdout + done.stderr
    run_dir, summary, _ = read_run(runs_dir)
    (task,) = summary["tasks"]
    assert task["status"] == "failed"
    assert re.match(
        r"sandbox refactor-agent-\S+: the sandbox container was removed or stopped from outside", task["reason"]
    )
    assert "pkg/extra.py" in (run_dir / "patch.diff").read_text(), "the work so far is kept for the morning"
    assert task["lost"] == "sandbox", "infrastructure lost, said so: never the model's failure"
    assert reason_line(TaskSummary.model_validate(task)).startswith("lost the sandbox: sandbox refactor-agent-")


def test_context_overflow_fails_the_task_with_that_reason(tmp_path: Path) -> None:
    """A window that cannot hold even the system message and the task: the task fails before its first request."""
    repo = make_repo(tmp_path / "repo")
    before = checkout_fingerprint(repo)
    with ScriptedServer(n_ctx=200) as server:
        assert invoke(repo, server, tmp_path / "runs") == 1
        chat_requests = server.requests
    assert checkout_fingerprint(repo) == before
    _, summary, _ = read_run(tmp_path / "runs")
    reason = summary["tasks"][0]["reason"]
    assert re.match(r"the system message and the task take [\d,]+ of the 200-token window, past the 170 ", reason)
    assert "--ctx" in reason and chat_requests == []


# Outputs that outgrow a small window: 700 numbers, about 1,000 tokens each in the scripted server's count.
WINDOW = 9_000
LONG_OUTPUTS = [
    Reply(tool_calls=[("bash", {"command": f"seq {n} {n + 700}"})], reasoning="more " * 50) for n in range(5)
]


EXCEEDED = Fail(
    400,
    {
        "error": {
            "code": 400,
            "type": "exceed_context_size_error",
            "message": "request (70000 tokens) exceeds the available context size (65536 tokens), try increasing it",
            "n_prompt_tokens": 70_000,
            "n_ctx": 65_536,
        }
    },
)


HANDOFF = Reply(content="I looked at seven long listings; the rename of compute_area is still to do.")


@pytest.mark.parametrize("case", ["threshold", "summary", "exceed_context_size_error"])
def test_a_task_that_outgrows_the_window_compacts_and_commits_verified(tmp_path: Path, case: str) -> None:
    """Past the threshold of a small window the conversation is compacted before the request: older results
    stubbed, or, in a smaller window still, replaced by the model's handoff summary; a server that answers
    exceed_context_size_error gets the request compacted and sent again. Every time the system message is the
    same in every request, and the task commits verified."""
    repo = make_repo(tmp_path / "repo")
    overflow = case == "exceed_context_size_error"
    script = [RENAME_SCRIPT[0], *LONG_OUTPUTS, *([EXCEEDED] if overflow else []), *RENAME_SCRIPT[1:]]
    window = {"threshold": WINDOW, "summary": WINDOW * 2 // 3, "exceed_context_size_error": 65_536}[case]
    with ScriptedServer(script, n_ctx=window, summary=HANDOFF) as server:
        assert invoke(repo, server, tmp_path / "runs", "--max-turns", "12") == 0
        sent = server.requests
    run_dir, summary, transcript = read_run(tmp_path / "runs")
    (task,) = summary["tasks"]
    assert (task["status"], task["verdict"]) == ("committed", "verified"), task["reason"]
    compactions = [event for event in transcript if event["type"] == "compaction"]
    assert compactions and {event["reason"] for event in compactions} == {"overflow" if overflow else "threshold"}
    assert len(task["compactions"]) == len(compactions)
    assert len({json.dumps(body["messages"][0]) for body in sent}) == 1, "the system message never changes"
    if overflow:  # the compacted request went out again, and the conversation went on from it
        (compaction,) = compactions
        retried = next(body for body in sent if body["messages"][1:] == compaction["messages"])
        assert compaction["tokens_before"] == 70_000 and sent.index(retried) == len(LONG_OUTPUTS) + 2
        return
    assert all(tokens_of(rendered_prompt(body)) < window * 0.85 for body in sent if not asks_for_a_summary(body))
    stages = {event["stage"] for event in compactions}
    if case == "threshold":
        assert stages == {"stubs"}, "older results stubbed were enough"
    else:
        assert "summary" in stages
        request = next(index for index, body in enumerate(sent) if asks_for_a_summary(body))
        live = sent[request - 1]["messages"]
        # The live history, which the server holds, when the request leaves room for the summary; else trimmed.
        base = sent[request]["messages"][:-1]
        assert base[:2] == live[:2]
        assert base[: len(live)] == live or base in (trim(base).messages, trim(base, 0).messages)
        after = sent[request + 1]["messages"]
        assert after[1] == live[1] and HANDOFF.content in after[2]["content"]
        assert "git diff --stat" in after[2]["content"]
    report = (run_dir / "report.md").read_text()
    assert "Compacted to fit the server's window:" in report


def test_two_tasks_share_the_repository_prefix(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    finish = Reply(tool_calls=[("finish", {"summary": "done"})])
    with ScriptedServer([finish, finish], speculative=True) as server:
        result = CliRunner().invoke(
            app,
            ["run", str(repo), "--task", "first", "--task", "second", "--server", server.url,
             "--runs-dir", str(tmp_path / "runs")],
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    first, second = (request["messages"] for request in server.requests)
    assert first[0] == second[0]
    assert first[1]["content"] != second[1]["content"]
    run_dir, summary, _ = read_run(tmp_path / "runs")
    assert [t["status"] for t in summary["tasks"]] == ["no_changes", "no_changes"]
    first_branch, second_branch = (e["branch"] for e in transcript_of(run_dir) if e["type"] == "task_start")
    assert first_branch != second_branch
    assert [t["branch"] for t in summary["tasks"]] == [None, None], "no commit, no branch left"
    assert not git.Repo(repo).git.for_each_ref("refs/heads/refactor-agent/")
    # A drafter configured (/slots) that made no drafts is the run's warning, not only each task's.
    assert summary["speculation_configured"] is True
    assert any("no drafts were made in 2 requests" in warning for warning in summary["warnings"])


def test_an_internal_error_costs_one_task_and_the_next_one_commits(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    before = checkout_fingerprint(repo)
    runs_dir = tmp_path / "runs"

    def remove_first_worktree() -> None:  # the first task's checkout disappears under it
        (task_worktree,) = (path for path in worktrees(repo) if path != str(repo))
        shutil.rmtree(task_worktree)

    script = [
        Reply(tool_calls=[("finish", {"summary": "done"})], before=remove_first_worktree),
        Reply(tool_calls=[("create_file", {"path": "pkg/extra.py", "content": "VALUE = 2\n"})]),
        Reply(tool_calls=[("finish", {"summary": "Add pkg.extra"})]),
    ]
    with ScriptedServer(script) as server:
        process = start_cli(cli_command(repo, server, runs_dir, "first", "second"), tmp_path / "scratch")
        assert process.wait(timeout=600) == 1
    assert checkout_fingerprint(repo) == before
    _, summary, _ = read_run(runs_dir)
    first, second = summary["tasks"]
    assert first["status"] == "failed" and re.match(r"internal error: \w+Error: ", first["reason"])
    assert second["status"] == "committed"
    (commit,) = git.Repo(repo).iter_commits(f"main..{second['branch']}")
    assert list(commit.stats.files) == ["pkg/extra.py"]


def test_sigkill_mid_request_keeps_every_step_and_the_next_run_removes_the_leftovers(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    before = checkout_fingerprint(repo)
    runs_dir, scratch = tmp_path / "runs", tmp_path / "scratch"
    script = [
        Reply(tool_calls=[("create_file", {"path": "notes.py", "content": "x = 1\n"})]),
        Reply(tool_calls=[("bash", {"command": "echo step-two"})]),
        Hold(),
    ]
    with ScriptedServer(script) as server:
        process = start_cli(cli_command(repo, server, runs_dir, "note"), scratch, stdout=subprocess.DEVNULL)
        try:
            wait_for(server.held.is_set, "the third request")
        finally:
            process.kill()
            process.wait(timeout=60)
    (run_dir,) = run_directories(runs_dir)
    events = [(e["type"], e.get("turn"), e.get("name")) for e in transcript_of(run_dir)]
    assert events == [
        ("run_start", None, None),
        ("environment", None, None),
        ("task_start", None, None),
        ("gate_start", None, None),
        ("baseline", None, None),
        ("request", 1, None),
        ("response", 1, None),
        ("tool_call", 1, "create_file"),
        ("tool_result", 1, "create_file"),
        ("request", 2, None),
        ("response", 2, None),
        ("tool_call", 2, "bash"),
        ("tool_result", 2, "bash"),
        ("request", 3, None),
    ]
    branch = next(event["branch"] for event in transcript_of(run_dir) if event["type"] == "task_start")
    # What kill -9 leaves: the worktree (which pins the branch), its scratch directory, the container.
    assert len(worktrees(repo)) == 2 and list(scratch.iterdir()) and run_containers(run_dir.name)

    with ScriptedServer([Reply(tool_calls=[("finish", {"summary": "nothing"})])]) as server:
        next_run = start_cli(cli_command(repo, server, tmp_path / "runs-2", "nothing"), scratch, stdout=subprocess.PIPE)
        output, _ = next_run.communicate(timeout=600)
    assert next_run.returncode == 0
    assert b"did not finish" in output
    assert worktrees(repo) == [str(repo)]
    assert checkout_fingerprint(repo) == before, "once the leftovers are swept, nothing of the killed run shows"
    assert not list(scratch.iterdir()) and not run_containers(run_dir.name)
    user_repo = git.Repo(repo)
    assert branch in [head.name for head in user_repo.heads]  # kept: resume may reuse it
    user_repo.git.branch("-D", branch)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_mid_command_keeps_the_diff_and_leaves_nothing_behind(
    tmp_path: Path, stop: signal.Signals
) -> None:
    repo = make_repo(tmp_path / "repo")
    before = checkout_fingerprint(repo)
    runs_dir, scratch = tmp_path / "runs", tmp_path / "scratch"
    script = [
        Reply(tool_calls=[("create_file", {"path": "notes.py", "content": "x = 1\n"})]),
        Reply(tool_calls=[("bash", {"command": "sleep 300"})]),
    ]
    with ScriptedServer(script) as server:
        process = start_cli(cli_command(repo, server, runs_dir, "note"), scratch, stdout=subprocess.DEVNULL)
        try:
            wait_for(lambda: list(runs_dir.glob("*/transcript.jsonl")), "the run to start")
            (run_dir,) = run_directories(runs_dir)

            def sleeping() -> bool:
                # A container can be listed while it is still being created or already replaced: not yet.
                with contextlib.suppress(docker.errors.APIError):
                    return any("sleep 300" in json.dumps(container.top()) for container in run_containers(run_dir.name))
                return False

            wait_for(sleeping, "the command to run")
            process.send_signal(stop)
            exit_code = process.wait(timeout=120)
        finally:
            process.kill()
    assert exit_code == 128 + stop
    summary = json.loads((run_dir / "summary.json").read_text())
    (task,) = summary["tasks"]
    assert (summary["status"], summary["interrupted_by"]) == ("interrupted", stop.name)
    assert (task["status"], task["reason"], task["turns"]) == ("interrupted", f"interrupted by {stop.name}", 2)
    assert "--- /dev/null\n+++ b/notes.py\n@@ -0,0 +1 @@\n+x = 1\n" in (run_dir / "patch.diff").read_text()
    (commit,) = git.Repo(repo).iter_commits(f"main..{task['branch']}")
    assert commit.hexsha == task["commit"] and list(commit.stats.files) == ["notes.py"]
    assert "Refactor-Agent-Status: interrupted" in commit.message.splitlines()
    last = transcript_of(run_dir)[-1]
    assert (last["type"], last["status"], last["signal"], last["exit_code"]) == (
        "run_end", "interrupted", stop.name, 128 + stop
    )  # fmt: skip
    assert not run_containers(run_dir.name)
    assert worktrees(repo) == [str(repo)] and not list(scratch.iterdir())
    assert checkout_fingerprint(repo) == before


def test_a_closed_stdout_sends_the_rest_to_the_log_and_the_run_goes_on(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    runs_dir = tmp_path / "runs"
    stdout_closed = threading.Event()
    script = [
        Reply(
            tool_calls=[("create_file", {"path": "notes.py", "content": "x = 1\n"})],
            before=lambda: stdout_closed.wait(120),  # everything after this point is written to a closed pipe
        ),
        Reply(tool_calls=[("finish", {"summary": "Add notes"})]),
    ]
    stderr = tmp_path / "stderr.txt"
    with ScriptedServer(script) as server, stderr.open("wb") as errors:
        process = start_cli(
            cli_command(repo, server, runs_dir, "note"), tmp_path / "scratch", stdout=subprocess.PIPE, stderr=errors
        )
        first_line = process.stdout.readline()  # `| head -1`
        process.stdout.close()
        stdout_closed.set()
        exit_code = process.wait(timeout=600)
    assert first_line and exit_code == 0
    assert stderr.read_text() == ""  # no "Exception ignored ... BrokenPipeError"
    run_dir, summary, _ = read_run(runs_dir)
    (task,) = summary["tasks"]
    assert task["status"] == "committed"
    log = (run_dir / "output.log").read_text()
    assert f"task 1 verified on {task['branch']} ({task['commit'][:12]}): " in log
    assert f"report: {(run_dir / 'report.html').absolute().as_uri()}" in log


@pytest.mark.llama_server
def test_a_model_that_answers_without_tool_calls_stops_with_no_changes(
    tmp_path: Path, llama_server: ServerState
) -> None:
    """SmolLM2 given tools answers in plain text: the task must end saying how the reply ended, after one turn."""
    repo = make_repo(tmp_path / "repo")
    before = checkout_fingerprint(repo)
    arguments = ["run", str(repo), "--task", "Rename compute_area to area", "--server", llama_server.url]
    options = ["--runs-dir", str(tmp_path / "runs"), "--max-tokens", "48", "--seed", "1", "--max-turns", "3"]
    result = CliRunner().invoke(app, [*arguments, *options, "--model", "smollm2"])
    assert run_directories(tmp_path / "runs"), result.output  # a run that stopped before its record says why
    (run_dir,) = run_directories(tmp_path / "runs")
    summary = json.loads((run_dir / "summary.json").read_text())
    events = [json.loads(line) for line in (run_dir / "transcript.jsonl").read_text().splitlines()]
    (task,) = summary["tasks"]
    assert result.exit_code == 0, result.output
    assert task["status"] == "no_changes", task
    assert task["turns"] == 1, task
    (response,) = [event for event in events if event["type"] == "response"]
    # SmolLM2 at temperature 1.0 usually rambles past 48 tokens and sometimes stops: the reason must say which.
    if response["stats"]["completion_tokens"] >= 48:
        assert task["reason"] == "the reply was cut at max_tokens without a tool call", task
    else:
        assert task["reason"] == "the model answered without calling a tool", task
    assert not response["message"].get("tool_calls") and response["message"]["content"].strip()
    assert not [event for event in events if event["type"] in ("tool_call", "tool_result")]
    # The prefix's prefill and then the request's: each reports its progress in at most a tenth of its prompt.
    progress = [event for event in events if event["type"] == "prefill_progress"]
    assert 2 <= len(progress) <= 22 and progress[-1]["processed"] == progress[-1]["total"]
    assert task["metrics"]["prompt_tokens"] > 0 and task["metrics"]["generated_tokens"] > 0
    # The launcher's server saves slots: the task's shared prefix (its system message and tools as the template
    # renders them, not its own message) is prefilled alone and saved once for later tasks, before the request
    # that then reuses all of it.
    (saved,) = [event for event in events if event["type"] == "prefix_cache"]
    assert saved["action"] == "saved" and saved["tokens"] < response["stats"]["prompt_tokens"], saved
    assert response["stats"]["cached_tokens"] == saved["tokens"], (saved, response["stats"])
    assert checkout_fingerprint(repo) == before


@pytest.mark.llama_server
def test_a_later_run_on_the_same_commit_restores_the_saved_prefix(tmp_path: Path, llama_server: ServerState) -> None:
    """The next night on an unchanged repository: the new run restores the prefix the first one saved, and its
    first request prefills only the task message."""
    repo = make_repo(tmp_path / "repo")

    def run(runs: Path) -> tuple[list[dict], dict]:
        arguments = ["run", str(repo), "--task", "Rename compute_area to area", "--server", llama_server.url]
        options = ["--runs-dir", str(runs), "--max-tokens", "8", "--seed", "1", "--max-turns", "1"]
        result = CliRunner().invoke(app, [*arguments, *options, "--model", "smollm2"])
        assert result.exit_code == 0, result.output
        (run_dir,) = run_directories(runs)
        events = [json.loads(line) for line in (run_dir / "transcript.jsonl").read_text().splitlines()]
        (response,) = [event for event in events if event["type"] == "response"]
        return [event for event in events if event["type"] == "prefix_cache"], response["stats"]

    _, first = run(tmp_path / "night-1")
    # Another prompt in between takes the slot, as a task on another repository would.
    OpenAIChatModel(LLMConfig(server_url=llama_server.url, sampling=SamplingConfig(max_tokens=2))).complete(
        [{"role": "system", "content": "Another repository entirely."}, {"role": "user", "content": "Hi"}], []
    )
    second_cache, second = run(tmp_path / "night-2")
    assert [event["action"] for event in second_cache] == ["restored"], second_cache
    assert second["prompt_tokens"] - second["cached_tokens"] < first["prompt_tokens"] / 4, (first, second)


def test_a_task_killed_after_three_tool_calls_in_the_docker_sandboxes_goes_on_with_them(tmp_path: Path) -> None:
    """tests/run/test_resume.py's kill -9 (there in sandboxes on this machine) with the real CLI and Docker sandbox."""
    repo, run_dir, before_kill = killed_run(tmp_path, [*THREE_STEPS, Hold()], "Add one, two and three", cli=AGENT)
    assert wip_refs(repo)  # the files after each tool call, in the user's repository
    assert run_containers(run_dir.name), "the killed run's container is still there"

    done, after = resume(tmp_path, run_dir, [FINISH], cli=AGENT)
    assert done.returncode == 0, done.stdout
    assert "resuming run" in done.stdout
    held, first_after = before_kill[-1]["messages"], after[0]["messages"]
    assert json.dumps(first_after[: len(held)]) == json.dumps(held)
    calls = [call["function"]["name"] for m in first_after if m["role"] == "assistant" for call in m["tool_calls"]]
    assert calls == ["create_file", "create_file", "bash"]
    (task,) = json.loads((run_dir / "summary.json").read_text())["tasks"]
    (commit,) = git.Repo(repo).iter_commits(f"main..{task['branch']}")
    assert sorted(commit.stats.files) == ["pkg/one.py", "pkg/two.py", "three.txt"]
    assert wip_refs(repo) == [] and run_containers(run_dir.name) == []


def test_two_tasks_in_parallel_on_the_slots_of_one_server_commit_in_their_own_docker_sandboxes(tmp_path: Path) -> None:
    """tests/dispatch/test_fleet.py's tasks in parallel (there in sandboxes on this machine), here each in its own
    container at once."""
    repo = make_repo(tmp_path / "repo")
    tasks = {"alpha": "Add the alpha module", "beta": "Add the beta module"}
    scripts = {
        text: [
            Reply(tool_calls=[("create_file", {"path": f"pkg/{key}.py", "content": f"NAME = {key!r}\n"})]),
            Reply(tool_calls=[("finish", {"summary": f"Add pkg/{key}.py"})]),
        ]
        for key, text in tasks.items()
    }
    runs = tmp_path / "runs"
    options = [*(part for text in tasks.values() for part in ("--task", text)), "--parallel", "2"]
    with ScriptedServer(scripts=scripts, slots=2) as server:
        result = CliRunner().invoke(app, ["run", str(repo), *options, "--server", server.url, "--runs-dir", str(runs)])
    assert result.exit_code == 0, result.output
    _, summary, transcript = read_run(runs)
    assert [(task["status"], task["verdict"]) for task in summary["tasks"]] == [("committed", "verified")] * 2
    assert sorted(event["slot"] for event in transcript if event["type"] == "task_server") == [0, 1]
    for task, key in zip(summary["tasks"], tasks, strict=True):
        assert (
            git.Repo(repo).commit(task["branch"]).tree[f"pkg/{key}.py"].data_stream.read()
            == f"NAME = {key!r}\n".encode()
        )
    assert run_containers(summary["run_id"]) == []


@pytest.mark.llama_server
def test_the_readme_main_job_on_the_embedded_model_ends_with_what_it_proved(
    tmp_path: Path, llama_server_plain: ServerState
) -> None:
    """The first run a person makes (README): the embedded SmolLM2 with its reply cap, then an end block that says
    what the run proved about the install, where the report is and what to do next."""
    repo = make_repo(tmp_path / "repo")
    runs_dir = tmp_path / "runs"
    done = subprocess.run(
        [
            *AGENT, "run", str(repo), "--task", "Rename compute_area to area everywhere", "--effort", "max",
            "--server", llama_server_plain.url, "--runs-dir", str(runs_dir),
        ],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    run_dir, summary, transcript = read_run(runs_dir)
    proved, report, following = done.stdout.splitlines()[-3:]
    assert re.fullmatch(r"installation OK: server answered, sandbox ran, baseline \d+ passed", proved), done.stdout
    assert report == f"report: {(run_dir / 'report.html').absolute().as_uri()}" and (run_dir / "report.html").is_file()
    assert following == f"next: refactor-agent review {summary['run_id']}"
    generated = [event["stats"]["completion_tokens"] for event in transcript if event["type"] == "response"]
    assert generated and max(generated) <= EMBEDDED_REPLY_TOKENS, generated
    assert summary["served_model"] == "SmolLM2-135M-Instruct.Q4_1" and summary["model"] == LLMConfig().model
    (task,) = summary["tasks"]
    assert task_end_line(TaskSummary.model_validate(task)) in done.stdout.splitlines(), "the task's end, with why"


def test_run_json_prints_every_event_as_a_typed_json_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    runs_dir = tmp_path / "runs"
    with ScriptedServer(list(RENAME_SCRIPT)) as server:
        done = subprocess.run(
            [*cli_command(repo, server, runs_dir, "Rename compute_area to area"), "--json"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    events = [parse_event(line) for line in done.stdout.splitlines()]
    _, summary, transcript = read_run(runs_dir)
    assert [event.type for event in events] == [event["type"] for event in transcript]
    assert events[0].type == "run_start" and events[-1].type == "run_end"
    assert {"task_start", "tool_call", "tool_result", "gate_start", "gate", "task_end"} <= {e.type for e in events}
    assert done.stderr.splitlines()[-3] == f"run {summary['run_id']}: 1 verified", done.stderr
