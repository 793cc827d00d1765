"""A run's saved prefix on the real embedded server rendering DeepSeek V4 Flash 0731's chat template (SmolLM2's
replies, the run's tasks in sandboxes on this machine): what the first task saves is the shared prefix the template
gives, and the next task's first request reuses all of it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent.server.api import LlamaServerAPI
from agent.server.launcher import ServerState
from agent.server.rendering import Rendering

from support.cli_runs import LOCAL_AGENT, read_run, start_cli
from support.pack_repos import tiered_repo
from support.repos import make_repo

pytestmark = pytest.mark.llama_server


def test_a_run_saves_exactly_the_shared_prefix_and_its_next_task_reuses_it(
    tmp_path: Path, llama_server_v4: ServerState
) -> None:
    repo = make_repo(tmp_path / "repo")
    runs = tmp_path / "runs"
    tasks = ("--task", "Rename compute_area to area", "--task", "Add a docstring to every function")
    command = [
        *LOCAL_AGENT, "run", str(repo), *tasks, "--server", llama_server_v4.url, "--runs-dir", str(runs),
        "--max-turns", "1", "--max-tokens", "8", "--seed", "1", "--effort", "max",
    ]  # fmt: skip
    process = start_cli(command, tmp_path / "scratch", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output, _ = process.communicate(timeout=1200)
    assert process.returncode == 0, output.decode(errors="replace")
    _, summary, events = read_run(runs)
    assert len(summary["tasks"]) == 2, summary

    def of_task(task: int, kind: str) -> list[dict]:
        return [event for event in events if event["task"] == task and event["type"] == kind]

    first_task, second_task = sorted({event["task"] for event in events if event["type"] == "request"})
    first_request = of_task(first_task, "request")[0]
    system = first_request["new_messages"][0]
    assert system["role"] == "system"
    # The shared prefix as the server's own template renders it for this system message, tools and effort: the
    # tokens every task's first request on the commit starts with, computed apart from the run.
    with LlamaServerAPI(llama_server_v4.url) as api:
        shared = len(Rendering(api, "max").shared_prefix(system["content"], first_request["tools"]))

    (saved,) = [event for event in of_task(first_task, "prefix_cache") if event["action"] == "saved"]
    assert saved["tokens"] == shared, (saved, shared)
    first_response = of_task(first_task, "response")[0]
    assert shared < first_response["stats"]["prompt_tokens"]  # the task's own message is not in the file
    assert not [event for event in of_task(second_task, "prefix_cache") if event["action"] == "saved"]
    second_response = of_task(second_task, "response")[0]
    assert second_response["stats"]["cached_tokens"] >= shared, (second_response["stats"], shared)


def test_a_run_saves_the_slot_where_each_churn_tier_of_the_pack_ends_then_the_shared_prefix(
    tmp_path: Path, llama_server_v4: ServerState
) -> None:
    """So that night after night pays only for what changed: a later commit that changes only the newest files
    restores the longest boundary file its prompt extends (the restore itself: tests/server/test_kv_cache.py)."""
    repo = tiered_repo(tmp_path / "repo", functions=4)
    runs = tmp_path / "runs"
    command = [
        *LOCAL_AGENT, "run", str(repo), "--task", "Rename hot", "--server", llama_server_v4.url,
        "--runs-dir", str(runs), "--max-turns", "1", "--max-tokens", "8", "--seed", "1",
    ]  # fmt: skip
    process = start_cli(command, tmp_path / "scratch", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output, _ = process.communicate(timeout=1200)
    assert process.returncode == 0, output.decode(errors="replace")
    _, _, events = read_run(runs)
    first_request = next(event for event in events if event["type"] == "request")
    with LlamaServerAPI(llama_server_v4.url) as api:
        shared = len(
            Rendering(api, "max").shared_prefix(first_request["new_messages"][0]["content"], first_request["tools"])
        )
    saved = [event["tokens"] for event in events if event["type"] == "prefix_cache" and event["action"] == "saved"]
    # The two tiers' ends (stable/, then middle/), then the whole shared prefix.
    assert len(saved) == 3 and saved == sorted(set(saved)) and saved[-1] == shared, (saved, shared)
