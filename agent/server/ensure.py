"""The llama-server a run talks to: the configured one, or the embedded preset started on its port."""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx

from agent.protocol.config import LLMConfig
from agent.server.api import LlamaServerAPI, ServerError, ServerLoading, ServerUnreachable
from agent.server.binary import find_binary
from agent.server.launcher import start_server
from agent.server.presets import PresetRequest, build_preset

# Loading a 100+ GB model from disk takes minutes; past this the user should look at the server.
LOAD_WAIT_S = 900.0
LOAD_POLL_S = 2.0
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
START_HINT = (
    "start one with `refactor-agent server start --preset dspark --model V4-FLASH.gguf --draft DSPARK.gguf` "
    "(or `--preset embedded` to try the installation)"
)


class TooFewSlots(ServerError):
    """The server cannot serve --parallel N tasks at once, each in its own slot."""


def ensure_server(
    llm: LLMConfig,
    *,
    log: Callable[[str], None],
    slots: int = 1,
    load_wait_s: float = LOAD_WAIT_S,
    poll_s: float = LOAD_POLL_S,
) -> str:
    """The base URL of a ready llama-server with at least `slots` slots (`run --parallel`): the configured one,
    or the embedded preset started on its port."""
    with LlamaServerAPI(llm.server_url, timeout_s=10.0) as api:
        try:
            _wait_while_loading(api, log, load_wait_s=load_wait_s, poll_s=poll_s)
            _check_slots(api, slots)
            return llm.server_url
        except ServerUnreachable:
            if llm.server_explicit:
                raise ServerUnreachable(f"no llama-server answers at {api.root}: {START_HINT}") from None
    address = urlsplit(llm.server_url)
    if address.hostname not in LOCAL_HOSTS or address.port is None:
        raise ServerUnreachable(f"no llama-server answers at {llm.server_url}: {START_HINT}")
    for line in (
        "!" * 100,
        f"! no llama-server at {llm.server_url}: starting the EMBEDDED preset (SmolLM2-135M on CPU).",
        "! A 135M model proves the installation works; it will NOT refactor anything real.",
        "! For real work: `refactor-agent server start --preset dspark --model ... --draft ...`",
        "!" * 100,
    ):
        log(line)
    preset = build_preset(PresetRequest(preset="embedded", host=address.hostname, port=address.port, parallel=slots))
    start_server(preset, binary=find_binary(), log=log)
    log("the embedded server keeps running after this run: `refactor-agent server stop` ends it")
    return llm.server_url


def _check_slots(api: LlamaServerAPI, slots: int) -> None:
    """Pinned to a slot the server does not have, a request silently lands in any slot (seen with the PyPI build),
    where two tasks would evict each other's prefix: refuse before anything starts."""
    if slots == 1:
        return
    try:
        total = int(api.props().get("total_slots", 1))
    except (httpx.HTTPError, ValueError) as error:
        raise ServerError(f"{api.root} does not say how many slots it has (/props: {error})") from None
    if total < slots:
        raise TooFewSlots(
            f"--parallel {slots} needs {slots} slots, but the llama-server at {api.root} has {total}: start it with "
            f"`refactor-agent server start --parallel {slots}` (or llama-server --parallel {slots})"
        )


def _wait_while_loading(api: LlamaServerAPI, log: Callable[[str], None], *, load_wait_s: float, poll_s: float) -> None:
    deadline = time.monotonic() + load_wait_s
    announced = False
    while True:
        try:
            api.health()
            return
        except ServerLoading:
            if time.monotonic() > deadline:
                raise ServerLoading(f"llama-server at {api.root} still loading after {load_wait_s:g}s") from None
            if not announced:
                log(f"llama-server at {api.root} is loading the model; waiting up to {load_wait_s:g}s")
                announced = True
            time.sleep(poll_s)
        except httpx.HTTPStatusError as error:
            raise ServerError(
                f"{api.root} answers /health with HTTP {error.response.status_code}: is it a llama-server?"
            ) from None
