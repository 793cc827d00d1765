"""The preflight's server check: a server still loading its model is waited for, up to a limit."""

from __future__ import annotations

import pytest

from agent.config import LLMConfig
from agent.llama_api import ServerLoading
from agent.server.ensure import ensure_server

from scripted_server import ScriptedServer


def test_a_loading_server_is_waited_for_until_it_answers() -> None:
    logs: list[str] = []
    with ScriptedServer(loading_requests=3) as server:
        llm = LLMConfig(server_url=server.url, server_explicit=True)
        assert ensure_server(llm, log=logs.append, poll_s=0.01) == server.url
        assert server.loading_requests == 0  # every 503 was seen: it polled through the load
    assert len(logs) == 1 and "is loading the model; waiting up to 900s" in logs[0]


def test_a_server_that_keeps_loading_ends_the_wait_with_one_line() -> None:
    with ScriptedServer(loading_requests=10**9) as server:
        llm = LLMConfig(server_url=server.url, server_explicit=True)
        with pytest.raises(ServerLoading) as raised:
            ensure_server(llm, log=lambda _line: None, load_wait_s=0.5, poll_s=0.05)
    message = str(raised.value)
    assert message == f"llama-server at {server.root} still loading after 0.5s"
