from pathlib import Path

import httpx
import pytest

from agent.server.binary import find_embedded_model
from agent.server.launcher import check_flags
from agent.server.presets import (
    DSPARK_DEFAULT_CTX,
    EMBEDDED_MAX_CTX,
    EMBEDDED_REPLY_TOKENS,
    PresetError,
    PresetRequest,
    build_preset,
)


def _pairs(arguments: list[str]) -> dict[str, str]:
    """flag -> value for flags followed by a value; bare flags map to ''."""
    pairs: dict[str, str] = {}
    for index, argument in enumerate(arguments):
        if argument.startswith("--"):
            following = arguments[index + 1] if index + 1 < len(arguments) else ""
            pairs[argument] = "" if following.startswith("--") else following
    return pairs


@pytest.fixture
def ggufs(tmp_path: Path) -> tuple[Path, Path]:
    model, draft = tmp_path / "V4-Flash-0731-00001-of-00003.gguf", tmp_path / "V4-Flash-0731-DSpark.gguf"
    model.write_bytes(b"GGUF")
    draft.write_bytes(b"GGUF")
    return model, draft


def test_dspark_preset_has_every_documented_flag(ggufs):
    model, draft = ggufs
    preset = build_preset(PresetRequest(preset="dspark", model=model, draft=draft, port=8081))
    pairs = _pairs(preset.arguments())
    assert pairs["--model"] == str(model)
    assert pairs["--model-draft"] == str(draft)
    assert pairs["--spec-type"] == "draft-dspark"
    assert pairs["--spec-draft-n-max"] == "5"
    assert pairs["--fit"] == "off"
    assert pairs["--flash-attn"] == "on"
    assert pairs["--ctx-size"] == str(DSPARK_DEFAULT_CTX)
    assert pairs["--n-gpu-layers"] == "all"
    assert pairs["--parallel"] == "1"
    assert pairs["--cache-ram"] == "0"
    assert {"--jinja", "--metrics", "--no-cache-idle-slots"} <= pairs.keys()
    assert (pairs["--temp"], pairs["--top-p"], pairs["--min-p"]) == ("1.0", "0.95", "0.0")
    assert (pairs["--host"], pairs["--port"]) == ("127.0.0.1", "8081")
    assert preset.url == "http://127.0.0.1:8081/v1"
    assert preset.drafting


def test_dspark_context_and_gpu_layers_are_the_users_choice(ggufs):
    model, draft = ggufs
    preset = build_preset(PresetRequest(preset="dspark", model=model, draft=draft, ctx_size=1_048_576, gpu_layers="40"))
    pairs = _pairs(preset.arguments())
    assert (pairs["--ctx-size"], pairs["--n-gpu-layers"]) == ("1048576", "40")


@pytest.mark.parametrize("preset", ["dspark", "embedded"])
def test_n_slots_get_n_times_the_window_each_a_window_of_its_own(ggufs, preset):
    model, draft = ggufs
    files = {"model": model, "draft": draft} if preset == "dspark" else {}
    one = build_preset(PresetRequest(preset=preset, ctx_size=4096, **files))
    two = build_preset(PresetRequest(preset=preset, ctx_size=4096, parallel=2, **files))
    assert (_pairs(one.arguments())["--parallel"], _pairs(one.arguments())["--ctx-size"]) == ("1", "4096")
    assert "--no-kv-unified" not in one.arguments()
    pairs = _pairs(two.arguments())
    assert (pairs["--parallel"], pairs["--ctx-size"]) == ("2", "8192")
    assert "--no-kv-unified" in pairs, "a slot's window is its own, not a share of one pool"


def test_dspark_needs_both_model_and_draft(ggufs):
    model, _ = ggufs
    with pytest.raises(PresetError, match="--draft"):
        build_preset(PresetRequest(preset="dspark", model=model))


def test_dspark_names_a_missing_file(ggufs, tmp_path):
    model, _ = ggufs
    with pytest.raises(PresetError, match="draft model not found"):
        build_preset(PresetRequest(preset="dspark", model=model, draft=tmp_path / "nope.gguf"))


def test_embedded_preset_runs_smollm2_on_cpu_without_drafting():
    preset = build_preset(PresetRequest())
    pairs = _pairs(preset.arguments())
    assert pairs["--model"] == str(find_embedded_model())
    assert pairs["--ctx-size"] == str(EMBEDDED_MAX_CTX)
    assert pairs["--n-gpu-layers"] == "0"
    assert "--metrics" in pairs
    assert "--no-repack" in pairs
    assert "--spec-type" not in pairs and "--model-draft" not in pairs
    assert not preset.drafting


def test_embedded_self_draft_uses_the_same_gguf():
    pairs = _pairs(build_preset(PresetRequest(self_draft=True, ctx_size=4096)).arguments())
    assert pairs["--model-draft"] == pairs["--model"]
    assert pairs["--spec-type"] == "draft-simple"
    assert pairs["--ctx-size"] == "4096"


def test_embedded_rejects_a_context_beyond_smollm2s_training():
    with pytest.raises(PresetError, match="8192"):
        build_preset(PresetRequest(ctx_size=EMBEDDED_MAX_CTX + 1))


def test_embedded_rejects_a_foreign_draft(ggufs):
    _, draft = ggufs
    with pytest.raises(PresetError, match="--self-draft"):
        build_preset(PresetRequest(draft=draft))


def test_extra_arguments_come_last_so_they_override():
    preset = build_preset(PresetRequest(self_draft=True, extra_args=["--spec-synth-rates", "0.8,0.6,0.4,0.2,0.1"]))
    assert preset.arguments()[-2:] == ["--spec-synth-rates", "0.8,0.6,0.4,0.2,0.1"]
    assert preset.command(Path("/opt/llama-server"))[0] == "/opt/llama-server"


@pytest.mark.parametrize("preset", ["dspark", "embedded"])
def test_presets_save_slots_under_the_state_directory(ggufs, tmp_path, monkeypatch, preset):
    """Saved prefixes outlive the server: both presets name a --slot-save-path the agent manages."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    model, draft = ggufs
    files = {"model": model, "draft": draft} if preset == "dspark" else {}
    pairs = _pairs(build_preset(PresetRequest(preset=preset, **files)).arguments())
    assert pairs["--slot-save-path"] == str(tmp_path / "state" / "refactor-agent" / "kv-cache")
    chosen = build_preset(PresetRequest(preset=preset, slot_save_path=tmp_path / "mine", **files))
    assert _pairs(chosen.arguments())["--slot-save-path"] == str(tmp_path / "mine")


@pytest.mark.llama_server
def test_both_presets_only_use_flags_the_binary_knows(llama_binary, tmp_path):
    model, draft = tmp_path / "model.gguf", tmp_path / "draft.gguf"
    model.write_bytes(b"GGUF")
    draft.write_bytes(b"GGUF")
    check_flags(build_preset(PresetRequest(preset="dspark", model=model, draft=draft)), llama_binary)
    check_flags(build_preset(PresetRequest(self_draft=True)), llama_binary)


def test_the_embedded_preset_caps_a_reply(ggufs):
    model, draft = ggufs
    embedded = _pairs(build_preset(PresetRequest(preset="embedded", model=model)).arguments())
    assert embedded["--n-predict"] == str(EMBEDDED_REPLY_TOKENS) == "192"
    dspark = build_preset(PresetRequest(preset="dspark", model=model, draft=draft)).arguments()
    assert "--n-predict" not in dspark, "DeepSeek's replies are as long as the task needs"


@pytest.mark.llama_server
def test_the_embedded_server_ends_a_reply_at_its_cap(llama_server_plain) -> None:
    """No max_tokens in the request: the server's cap ends the reply, as `finish_reason: length`."""
    reply = httpx.post(
        f"{llama_server_plain.url}/chat/completions",
        json={
            "messages": [{"role": "user", "content": "Write a very long story about a dragon, in detail."}],
            "temperature": 0.0,
            "ignore_eos": True,
        },
        timeout=600,
    ).json()
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == EMBEDDED_REPLY_TOKENS
