import socket
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.protocol.config import LLMConfig
from agent.server.api import LlamaServerAPI, ServerUnreachable
from agent.server.ensure import ensure_server
from agent.server.errors import LaunchError
from agent.server.launcher import (
    ServerState,
    default_state_dir,
    find_state,
    read_states,
    server_status,
    start_server,
    stop_server,
)
from agent.server.presets import PresetRequest, ServerPreset, build_preset

from support.llama_fixtures import TEST_CTX, free_port


def _write_state(state_dir: Path, *, pid: int, port: int, binary: str = "/opt/llama/llama-server") -> ServerState:
    state = ServerState(
        pid=pid,
        preset="embedded",
        url=f"http://127.0.0.1:{port}/v1",
        port=port,
        binary=Path(binary),
        command=[binary, "--port", str(port)],
        log_file=state_dir / f"server-{port}.log",
        started_at=datetime.now(UTC),
        drafting=False,
    )
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / f"server-{port}.json").write_text(state.model_dump_json())
    return state


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_state_dir_follows_xdg_state_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_state_dir() == tmp_path / "state" / "refactor-agent"


def test_state_dir_defaults_to_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_state_dir() == tmp_path / ".cache" / "refactor-agent"


def test_states_are_kept_per_port(tmp_path):
    _write_state(tmp_path, pid=_dead_pid(), port=8080)
    _write_state(tmp_path, pid=_dead_pid(), port=8081)
    assert [state.port for state in read_states(tmp_path)] == [8080, 8081]
    found = find_state(8081, tmp_path)
    assert found is not None and found.url == "http://127.0.0.1:8081/v1"
    assert find_state(9999, tmp_path) is None


def test_stop_forgets_a_server_that_already_ended(tmp_path):
    _write_state(tmp_path, pid=_dead_pid(), port=8080)
    messages: list[str] = []
    stop_server(8080, state_dir=tmp_path, log=messages.append)
    assert "no longer running" in messages[0]
    assert read_states(tmp_path) == []


def test_stop_never_signals_a_recycled_pid(tmp_path):
    # The pid now belongs to some other program: stopping must forget the state, not kill that program.
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        _write_state(tmp_path, pid=bystander.pid, port=8080)
        stop_server(8080, state_dir=tmp_path, log=lambda _message: None)
        assert bystander.poll() is None
        assert read_states(tmp_path) == []
    finally:
        bystander.kill()
        bystander.wait()


def test_stop_without_any_state_is_one_clear_error(tmp_path):
    with pytest.raises(LaunchError, match="no llama-server started by refactor-agent"):
        stop_server(state_dir=tmp_path, log=lambda _message: None)


def test_stop_asks_for_a_port_when_several_run(tmp_path):
    _write_state(tmp_path, pid=_dead_pid(), port=8080)
    _write_state(tmp_path, pid=_dead_pid(), port=8081)
    with pytest.raises(LaunchError, match="pass --port"):
        stop_server(state_dir=tmp_path, log=lambda _message: None)


def test_ensure_server_never_stands_in_for_an_explicit_url():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = LLMConfig(server_url=f"http://127.0.0.1:{port}/v1", server_explicit=True)
    with pytest.raises(ServerUnreachable, match="refactor-agent server start --preset"):
        ensure_server(config, log=lambda _message: None)


@pytest.mark.llama_server
def test_an_unknown_flag_is_refused_before_launch(llama_binary, tmp_path):
    preset = build_preset(PresetRequest(extra_args=["--spec-draft-conf-min", "0.5"]))
    with pytest.raises(LaunchError, match="--spec-draft-conf-min"):
        start_server(preset, binary=llama_binary, state_dir=tmp_path, log=lambda _message: None)


@pytest.mark.llama_server
def test_a_server_that_dies_while_loading_is_reported_with_its_log(llama_binary, tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"this is not a gguf file" * 100)
    preset = build_preset(PresetRequest(model=broken, port=free_port()))
    with pytest.raises(LaunchError, match="exited") as raised:
        start_server(preset, binary=llama_binary, state_dir=tmp_path, log=lambda _message: None)
    assert "full log" in str(raised.value)
    assert find_state(preset.port, tmp_path) is None


@pytest.mark.llama_server
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
