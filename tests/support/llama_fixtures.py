"""pytest plugin: real llama-servers running SmolLM2-135M on 127.0.0.1, started once per session by the launcher.

Each server starts only when a test asks for it and stops at the end of the session. They are never skipped:
without the binary or the model the fixtures fail and say how to install them (scripts/setup-llama.sh).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent.protocol.config import LLMConfig, SamplingConfig
from agent.server.api import ServerError
from agent.server.binary import find_binary, find_chat_template, find_embedded_model
from agent.server.chat import OpenAIChatModel
from agent.server.launcher import ServerState, start_server, stop_server
from agent.server.presets import PresetRequest, build_preset

# Small enough to keep two SmolLM2 copies (target + self-draft) light; large enough for the cache tests' prompts.
TEST_CTX = 4096
# DeepSeek V4's template with the product's 13 tool schemas takes ~2.3k tokens before the first user message: a
# scripted task of a dozen turns fits SmolLM2's whole window, and the compaction tests outgrow TEST_CTX.
V4_CTX = 8192
READY_TIMEOUT_S = 180.0
# One thread to decode: the test process shares the (often 2) cores, and spinning ggml workers that lose their core
# to it decode at half the speed of a single thread. Two to prefill (--threads-batch), which the test waits for: the
# tier's largest cost, prompts of thousands of tokens, goes nearly twice as fast.
TEST_THREADS = ("--threads", "1", "--threads-batch", "2")
# Unconditional acceptance probability per draft position (non-increasing, one per --spec-draft-n-max position).
SYNTHETIC_RATES = (0.9, 0.7, 0.5, 0.3, 0.1)
READ_FILE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]
# About a thousand tokens of stable prefix, like the packed repository in front of a real conversation.
_REPOSITORY = "".join(
    f"def helper_{number}(value: int) -> int:\n    return value * {number} + {number % 7}\n\n" for number in range(40)
)
REPOSITORY_SYSTEM = f"You are a refactoring assistant. The repository:\n{_REPOSITORY}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def chat_model(state: ServerState, max_tokens: int, temperature: float = 1.0, **listeners) -> OpenAIChatModel:
    """The streaming client on one of these servers, seeded, never retrying (a failure shows at once)."""
    config = LLMConfig(
        server_url=state.url,
        server_explicit=True,
        model="smollm2",
        sampling=SamplingConfig(max_tokens=max_tokens, seed=7, temperature=temperature),
        max_retries=0,
    )
    return OpenAIChatModel(config, **listeners)


@pytest.fixture(scope="session")
def llama_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Launcher state for the session's servers, kept out of the user's ~/.cache; doctor reads it from here too."""
    directory = tmp_path_factory.mktemp("llama-state")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(directory))
        yield directory / "refactor-agent"


@pytest.fixture(scope="session")
def llama_binary() -> Path:
    try:
        find_embedded_model()
        return find_binary()
    except ServerError as error:
        pytest.fail(f"llama_server tests need a real llama-server: {error}", pytrace=False)


@contextmanager
def running_server(request: PresetRequest, binary: Path, state_dir: Path) -> Iterator[ServerState]:
    state = start_server(build_preset(request), binary=binary, state_dir=state_dir, ready_timeout_s=READY_TIMEOUT_S)
    try:
        yield state
    finally:
        stop_server(state.port, state_dir=state_dir, log=print)


def _embedded(
    *, self_draft: bool, extra_args: tuple[str, ...] = (), ctx: int = TEST_CTX, save_dir: Path | None = None
) -> PresetRequest:
    extra = [*TEST_THREADS, *extra_args]
    return PresetRequest(
        self_draft=self_draft, ctx_size=ctx, port=free_port(), slot_save_path=save_dir, extra_args=extra
    )


@pytest.fixture(scope="session")
def llama_server(llama_binary: Path, llama_state_dir: Path) -> Iterator[ServerState]:
    """The embedded preset drafting with itself: real speculative decoding, real prompt cache, --metrics on."""
    with running_server(_embedded(self_draft=True), llama_binary, llama_state_dir) as state:
        yield state


@pytest.fixture(scope="session")
def llama_server_plain(llama_binary: Path, llama_state_dir: Path) -> Iterator[ServerState]:
    """The embedded preset without speculation: all that /props, /tokenize and plain chat need."""
    with running_server(_embedded(self_draft=False), llama_binary, llama_state_dir) as state:
        yield state


@pytest.fixture(scope="session")
def llama_server_synthetic(llama_binary: Path, llama_state_dir: Path) -> Iterator[ServerState]:
    """Self-draft with llama-server's synthetic acceptance: position i of a draft is kept with SYNTHETIC_RATES[i]."""
    extra = ("--spec-synth-rates", ",".join(str(rate) for rate in SYNTHETIC_RATES))
    with running_server(_embedded(self_draft=True, extra_args=extra), llama_binary, llama_state_dir) as state:
        yield state


@pytest.fixture(scope="session")
def llama_server_misconfigured(llama_binary: Path, llama_state_dir: Path) -> Iterator[ServerState]:
    """Speculation configured wrong: the drafter is loaded and runs, but no proposal is ever confident enough to
    be kept, so no draft is made while every request still answers 200 (what a DSpark server without --fit off
    looks like from the outside)."""
    extra = ("--spec-draft-p-min", "1.01")
    with running_server(_embedded(self_draft=True, extra_args=extra), llama_binary, llama_state_dir) as state:
        yield state


def _v4_template() -> tuple[str, ...]:
    """SmolLM2 served with DeepSeek V4 Flash 0731's own template: the server then renders prompts as V4's would and
    picks its DeepSeek V3.2/V4 parser (`common/chat.cpp`), so the tests see V4's prompts and V4's tool calls."""
    try:
        return ("--chat-template-file", str(find_chat_template()))
    except ServerError as error:
        pytest.fail(f"the V4 template tests need the kept template: {error}", pytrace=False)


@contextmanager
def v4_server(
    binary: Path, state_dir: Path, save_dir: Path, *, ctx: int = V4_CTX, extra_args: tuple[str, ...] = ()
) -> Iterator[ServerState]:
    """The embedded preset with V4's template, saving slots into `save_dir` (never the user's cache)."""
    request = _embedded(self_draft=False, extra_args=(*_v4_template(), *extra_args), ctx=ctx, save_dir=save_dir)
    with running_server(request, binary, state_dir) as state:
        yield state


@pytest.fixture(scope="session")
def llama_server_v4(
    llama_binary: Path, llama_state_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerState]:
    """SmolLM2 rendering DeepSeek V4's template (thinking on, the server's default), one slot of V4_CTX tokens. One
    server for the whole session: its first prefill of the tools is the tier's largest cost."""
    with v4_server(llama_binary, llama_state_dir, tmp_path_factory.mktemp("v4-slots")) as state:
        yield state


@pytest.fixture(scope="session")
def llama_server_v4_small(
    llama_binary: Path, llama_state_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerState]:
    """The V4 template in a TEST_CTX window: conversations that outgrow it (compaction)."""
    save_dir = tmp_path_factory.mktemp("v4-small-slots")
    with v4_server(llama_binary, llama_state_dir, save_dir, ctx=TEST_CTX) as state:
        yield state


@pytest.fixture(scope="session")
def llama_server_v4_thinking_off(
    llama_binary: Path, llama_state_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerState]:
    """The V4 template with thinking switched off for every request (`--reasoning off`): effort then does nothing."""
    save_dir = tmp_path_factory.mktemp("v4-off-slots")
    with v4_server(llama_binary, llama_state_dir, save_dir, ctx=TEST_CTX, extra_args=("--reasoning", "off")) as state:
        yield state
