"""A task whose conversation outgrows a small real window: the real llama-server (SmolLM2 rendering DeepSeek V4's
template in a 4,096-token window) counts every request and plays the scripted replies through its own DSML parser
(tests/support/played_server.py); the real command line runs the task, its sandbox on this machine. The
conversation is compacted instead of overflowing, the system message never changes, and the task commits
verified. The same task on the Docker sandbox with a scripted server is in tests/run/test_run_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import agent.run.command
from agent.cli import app
from agent.server.launcher import ServerState

from support.cli_runs import read_run
from support.dsml import Reply, invoke
from support.local_sandbox import LocalSandboxes
from support.played_server import PlayedServer
from support.repos import make_repo
from support.scripted_server import Fail

pytestmark = pytest.mark.llama_server

# Listings of about 600 tokens each (a token a character): the 13 tool schemas, the system message and the task
# take about 2,900 of the 4,096 tokens, so each listing takes the conversation past the threshold (3,481).
LISTINGS = [
    Reply("Look at more of the numbers.", calls=(invoke("bash", command=f"seq {n} {n + 150}"),)) for n in range(2)
]
GLANCE = Reply("A few numbers first.", calls=(invoke("bash", command="seq 1 20"),))
RENAME = [
    Reply(
        "Rename the definition and its callers.",
        calls=(
            invoke("str_replace", path="pkg/geometry.py", old="def compute_area(", new="def area("),
            invoke("bash", command="sed -i 's/compute_area/area/g' pkg/report.py tests/test_geometry.py"),
        ),
    ),
    Reply("Check the tests.", calls=(invoke("run_tests"),)),
    Reply("Done.", calls=(invoke("finish", summary="Rename compute_area to area\n\nCallers and tests follow."),)),
]
HANDOFF = Reply("Summarise.", content="I listed numbers; the rename of compute_area is still to do.")


def exceeded(n_ctx: int) -> Fail:
    """llama-server's answer to a prompt over its window (HTTP 400 before any token)."""
    tokens = n_ctx + 500
    message = f"request ({tokens} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it"
    error = {"code": 400, "type": "exceed_context_size_error", "message": message}
    return Fail(400, {"error": {**error, "n_prompt_tokens": tokens, "n_ctx": n_ctx}})


@pytest.mark.parametrize("case", ["threshold", "exceed_context_size_error"])
def test_a_task_that_outgrows_a_small_real_window_compacts_and_commits_verified(
    llama_server_v4_small: ServerState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    monkeypatch.setattr(agent.run.command, "docker_sandboxes", lambda: LocalSandboxes(tmp_path))
    for variable in ("GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"):  # one commit id, so one packed prompt for both cases:
        monkeypatch.setenv(variable, "2026-01-01T00:00:00+00:00")  # the server's cache serves the second one's
    n_ctx = 4096
    overflow = case == "exceed_context_size_error"
    # The server's answer that the request does not fit comes while the window's own threshold is not reached.
    script = [GLANCE, exceeded(n_ctx), *LISTINGS, *RENAME] if overflow else [GLANCE, *LISTINGS, *RENAME]
    repo = make_repo(tmp_path / "repo")
    runs_dir = tmp_path / "runs"
    with PlayedServer(llama_server_v4_small.url, script, summary=HANDOFF) as played:
        result = CliRunner().invoke(
            app,
            ["run", str(repo), "--task", "Rename compute_area to area", "--server", played.url,
             "--runs-dir", str(runs_dir), "--max-turns", "20"],
        )  # fmt: skip
        exchanges = list(played.exchanges)
    assert result.exit_code == 0, result.output
    run_dir, summary, transcript = read_run(runs_dir)
    (task,) = summary["tasks"]
    assert (task["status"], task["verdict"]) == ("committed", "verified"), task["reason"]
    compactions = [event for event in transcript if event["type"] == "compaction"]
    assert compactions and all(event["n_ctx"] == n_ctx for event in compactions)
    assert {event["reason"] for event in compactions} == ({"overflow", "threshold"} if overflow else {"threshold"})
    assert len(task["compactions"]) == len(compactions)
    systems = {json.dumps(exchange.body["messages"][0], ensure_ascii=False) for exchange in exchanges}
    assert len(systems) == 1, "the system message is byte-identical in every request"
    # Every request the server ran fit its window: the real server counted and answered each one.
    served = [exchange for exchange in exchanges if not isinstance(exchange.step, Fail)]
    assert all(exchange.status == 200 for exchange in served)
    assert all(len(exchange.tokens) < n_ctx for exchange in served)
    assert played.script == [], "every scripted step was played"
    if overflow:  # the compacted conversation went out again, in place of the request the server refused
        refused = next(index for index, exchange in enumerate(exchanges) if isinstance(exchange.step, Fail))
        compaction = next(event for event in compactions if event["reason"] == "overflow")
        assert compaction["tokens_before"] == n_ctx + 500
        retried = next(e for e in exchanges[refused + 1 :] if e.body["messages"][1:] == compaction["messages"])
        assert retried.status == 200
    assert "Compacted to fit the server's window:" in (run_dir / "report.md").read_text()
