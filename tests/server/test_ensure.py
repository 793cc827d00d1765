"""The preflight's server check: a server still loading its model is waited for, up to a limit; a server with
fewer slots than --parallel asks for is refused; a running one is used as it is; with none at the default URL the
embedded preset is started (real llama-server, marker `llama_server`)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from agent.protocol.config import LLMConfig
from agent.server.api import LlamaServerAPI, ServerLoading
from agent.server.binary import find_binary
from agent.server.ensure import TooFewSlots, ensure_server
from agent.server.launcher import find_state, stop_server

from support.llama_fixtures import free_port
from support.scripted_server import ScriptedServer


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
            ensure_server(llm, log=lambda _line: None, load_wait_s=0.1, poll_s=0.02)
    message = str(raised.value)
    assert message == f"llama-server at {server.root} still loading after 0.1s"


def test_parallel_tasks_need_a_slot_each() -> None:
    with ScriptedServer(slots=2) as server:
        llm = LLMConfig(server_url=server.url, server_explicit=True)
        assert ensure_server(llm, log=lambda _line: None, slots=2) == server.url
        with pytest.raises(TooFewSlots) as raised:
            ensure_server(llm, log=lambda _line: None, slots=3)
    assert str(raised.value) == (
        f"--parallel 3 needs 3 slots, but the llama-server at {server.root} has 2: start it with "
        "`refactor-agent server start --parallel 3` (or llama-server --parallel 3)"
    )


@pytest.mark.llama_server
def test_ensure_server_returns_a_running_server_untouched(llama_server):
    logged: list[str] = []
    assert ensure_server(LLMConfig(server_url=llama_server.url), log=logged.append) == llama_server.url
    assert logged == []


@pytest.mark.llama_server
def test_ensure_server_starts_the_embedded_preset_loudly(llama_binary, llama_state_dir):
    url = f"http://127.0.0.1:{free_port()}/v1"
    logged: list[str] = []
    assert ensure_server(LLMConfig(server_url=url), log=logged.append) == url
    port = urlsplit(url).port
    try:
        assert any("will NOT refactor anything real" in line for line in logged)
        with LlamaServerAPI(url) as api:
            assert api.health() == {"status": "ok"}
            assert Path(api.props()["model_path"]).name == "SmolLM2-135M-Instruct.Q4_1.gguf"
        state = find_state(port)
        assert state is not None and state.preset == "embedded" and Path(state.binary) == find_binary()
    finally:
        stop_server(port, log=lambda _message: None)
