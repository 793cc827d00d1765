"""The agent against a real llama-server (SmolLM2-135M on CPU): what a tiny real model does must not break a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.config import LLMConfig, SamplingConfig
from agent.journal import run_directories
from agent.llm import AssistantTurn, OpenAIChatModel, ToolCall
from agent.server.launcher import ServerState
from tools import default_registry

from repos import checkout_fingerprint, make_repo

pytestmark = [pytest.mark.llama_server, pytest.mark.docker]


def test_a_model_that_answers_without_tool_calls_stops_with_no_changes(
    tmp_path: Path, llama_server: ServerState
) -> None:
    """SmolLM2 given tools answers in plain text: the task must end because of exactly that, after one turn."""
    repo = make_repo(tmp_path / "repo")
    before = checkout_fingerprint(repo)
    arguments = ["run", str(repo), "--task", "Rename compute_area to area", "--server", llama_server.url]
    options = ["--runs-dir", str(tmp_path / "runs"), "--max-tokens", "48", "--seed", "1", "--max-turns", "3"]
    result = CliRunner().invoke(app, [*arguments, *options, "--model", "smollm2"])
    (run_dir,) = run_directories(tmp_path / "runs")
    summary = json.loads((run_dir / "summary.json").read_text())
    events = [json.loads(line) for line in (run_dir / "transcript.jsonl").read_text().splitlines()]
    (task,) = summary["tasks"]
    assert result.exit_code == 0, result.output
    assert task["status"] == "no_changes", task
    assert task["reason"] == "the model answered without calling a tool", task
    assert task["turns"] == 1, task
    (response,) = [event for event in events if event["type"] == "response"]
    assert not response["message"].get("tool_calls") and response["message"]["content"].strip()
    assert not [event for event in events if event["type"] in ("tool_call", "tool_result")]
    progress = [event for event in events if event["type"] == "prefill_progress"]
    assert 1 <= len(progress) <= 11 and progress[-1]["processed"] == progress[-1]["total"]
    assert task["metrics"]["prompt_tokens"] > 0 and task["metrics"]["generated_tokens"] > 0
    # The launcher's server saves slots: the task's prefix is saved once, after its first request, for later tasks.
    (saved,) = [event for event in events if event["type"] == "prefix_cache"]
    assert saved["action"] == "saved" and saved["tokens"] >= response["stats"]["prompt_tokens"], saved
    assert checkout_fingerprint(repo) == before


def test_garbage_tool_arguments_in_history_are_survived(llama_server: ServerState) -> None:
    """A model's broken JSON goes back into the history; the server's template must still render the next turn."""
    config = LLMConfig(server_url=llama_server.url, sampling=SamplingConfig(max_tokens=8, seed=3), max_retries=0)
    model = OpenAIChatModel(config)
    garbage = AssistantTurn(tool_calls=[ToolCall(id="call_1", name="bash", arguments='{"command": "ls -la')])
    messages = [
        {"role": "system", "content": "You refactor code."},
        {"role": "user", "content": "List the files."},
        garbage.to_message(),
        {"role": "tool", "tool_call_id": "call_1", "content": "error: arguments are not valid JSON"},
    ]
    turn = model.complete(messages, default_registry().schemas())
    assert turn.stats.prompt_tokens > 0 and turn.stats.completion_tokens > 0


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
