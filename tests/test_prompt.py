"""The repository context: packing counts tokens on the server, so a briefly-down server is retried like requests."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from agent.packing import PackError, PackOptions
from agent.prompt import system_prompt
from agent.protocol.config import LLMConfig
from agent.protocol.model import ModelUnavailable
from agent.server.chat import RetryPolicy
from prompts import load_prompt

from support.llama_fixtures import free_port
from support.pack_repos import tiered_repo
from support.repos import make_repo
from support.scripted_server import ScriptedServer


def test_a_server_that_refuses_connections_at_first_is_retried_until_it_answers(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    port = free_port()
    sleeps: list[float] = []
    retries: list[str] = []
    with ExitStack() as stack:

        def sleep(seconds: float) -> None:
            sleeps.append(seconds)
            if len(sleeps) == 2:  # the server is back after the second wait
                stack.enter_context(ScriptedServer(port=port))

        retry = RetryPolicy(LLMConfig(), on_retry=retries.append, sleep=sleep)
        options = PackOptions(server_url=f"http://127.0.0.1:{port}/v1", cache_dir=tmp_path / "cache")
        text = system_prompt(repo, options, retry).text
    assert sleeps == [2.0, 4.0]  # the requests' schedule
    assert "def compute_area(width, height):" in text
    assert len(retries) == 2 and "unreachable" in retries[0]


def test_a_server_that_stays_down_ends_after_the_retries(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    sleeps: list[float] = []
    retry = RetryPolicy(LLMConfig(max_retries=2), sleep=sleeps.append)
    options = PackOptions(server_url=f"http://127.0.0.1:{free_port()}/v1", cache_dir=tmp_path / "cache")
    with pytest.raises(ModelUnavailable, match=r"failed 3 times, last: .*unreachable"):
        system_prompt(repo, options, retry)
    assert sleeps == [2.0, 4.0]


def test_a_repository_problem_is_not_retried(tmp_path: Path) -> None:
    sleeps: list[float] = []
    with ScriptedServer() as server:
        options = PackOptions(server_url=server.url, cache_dir=tmp_path / "cache")
        with pytest.raises(PackError, match="not inside a git work tree"):
            system_prompt(tmp_path, options, RetryPolicy(LLMConfig(), sleep=sleeps.append))
    assert sleeps == []


def test_the_system_prompt_says_where_the_packs_churn_tiers_end_in_it(tmp_path: Path) -> None:
    """The saved prefixes keep the slot where each tier ends (agent/server/kv_cache.py): the offsets are into the
    system message, past the instructions, and fall where the next tier's first file starts."""
    repo = tiered_repo(tmp_path / "repo", functions=4)
    system = system_prompt(repo, PackOptions(cache_dir=tmp_path / "cache"), RetryPolicy(LLMConfig()))
    first, second = system.boundaries
    assert system.text[first:].startswith('<file path="middle/x.py">')
    assert system.text[second:].startswith('<file path="hot.py">')
    assert system.text.startswith(load_prompt("system").rstrip())
