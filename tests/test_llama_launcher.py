"""The launcher and the embedded fallback with the real llama-server binary."""

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from agent.config import LLMConfig
from agent.llama_api import LlamaServerAPI, ServerUnreachable
from agent.server import ensure_server
from agent.server.binary import binary_version, find_binary, supported_flags
from agent.server.errors import LaunchError
from agent.server.launcher import check_flags, find_state, server_status, start_server, stop_server
from agent.server.presets import PresetRequest, ServerPreset, build_preset

from llama_fixtures import TEST_CTX, free_port

pytestmark = pytest.mark.llama_server


def test_binary_runs_and_knows_the_dspark_flags(llama_binary):
    assert binary_version(llama_binary)
    flags = supported_flags(llama_binary)
    assert {"--spec-type", "--spec-draft-n-max", "--fit", "--no-cache-idle-slots", "--cache-ram", "--metrics"} <= flags


def test_both_presets_only_use_flags_the_binary_knows(llama_binary, tmp_path):
    model, draft = tmp_path / "model.gguf", tmp_path / "draft.gguf"
    model.write_bytes(b"GGUF")
    draft.write_bytes(b"GGUF")
    check_flags(build_preset(PresetRequest(preset="dspark", model=model, draft=draft)), llama_binary)
    check_flags(build_preset(PresetRequest(self_draft=True)), llama_binary)


def test_an_unknown_flag_is_refused_before_launch(llama_binary, tmp_path):
    preset = build_preset(PresetRequest(extra_args=["--spec-draft-conf-min", "0.5"]))
    with pytest.raises(LaunchError, match="--spec-draft-conf-min"):
        start_server(preset, binary=llama_binary, state_dir=tmp_path, log=lambda _message: None)


def test_a_server_that_dies_while_loading_is_reported_with_its_log(llama_binary, tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"this is not a gguf file" * 100)
    preset = build_preset(PresetRequest(model=broken, port=free_port()))
    with pytest.raises(LaunchError, match="exited") as raised:
        start_server(preset, binary=llama_binary, state_dir=tmp_path, log=lambda _message: None)
    assert "full log" in str(raised.value)
    assert find_state(preset.port, tmp_path) is None


def test_start_prints_the_command_records_state_and_stop_ends_it(llama_binary, tmp_path):
    preset: ServerPreset = build_preset(PresetRequest(ctx_size=TEST_CTX, port=free_port()))
    messages: list[str] = []
    state = start_server(preset, binary=llama_binary, state_dir=tmp_path, log=messages.append)
    try:
        assert any(str(llama_binary) in message and "--ctx-size 4096" in message for message in messages)
        assert find_state(preset.port, tmp_path) == state
        status = server_status(state)
        assert status.running and status.health == "ok"
        with pytest.raises(LaunchError, match=r"port \d+ is taken"):
            start_server(preset, binary=llama_binary, state_dir=tmp_path, log=lambda _message: None)
    finally:
        stop_server(preset.port, state_dir=tmp_path, log=messages.append)
    with LlamaServerAPI(state.url, timeout_s=2) as api, pytest.raises(ServerUnreachable):
        api.health()
    assert find_state(preset.port, tmp_path) is None


def test_ensure_server_returns_a_running_server_untouched(llama_server):
    logged: list[str] = []
    assert ensure_server(LLMConfig(server_url=llama_server.url), log=logged.append) == llama_server.url
    assert logged == []


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
