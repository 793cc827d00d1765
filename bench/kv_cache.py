"""Saved prefixes on a real llama-server with DeepSeek V4's chat template: what is saved, and what a later task's
first request reuses in another slot and after a restart.

    .venv/bin/python bench/kv_cache.py [--tokens 5000]

Starts the embedded preset (SmolLM2-135M on CPU) with `--parallel 2`, `--slot-save-path` in bench/out/kv-cache and
`--chat-template-file` DeepSeek V4 Flash 0731's template, builds a system prompt of about --tokens tokens from this
repository's own Python sources with the product's real tool list, and runs three tasks' first requests
(max_tokens 1) through the run's PrefixCache: cold (slot 0 of a fresh server: the shared prefix is prefilled alone
and saved, then the request), another slot (slot 1 restores the file), after a restart (a new server, nothing
resident, slot 0 restores it). Each row: the wall time of the first request from the call to its answer (prefill,
restore and save included), its prompt and cached tokens, the tokens restored and how long the restore took; then
the saved file. Writes bench/out/kv_cache.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from agent.protocol.config import LLMConfig, SamplingConfig  # noqa: E402
from agent.protocol.events import PrefixCacheEvent  # noqa: E402
from agent.server.api import LlamaServerAPI  # noqa: E402
from agent.server.binary import find_binary, find_chat_template  # noqa: E402
from agent.server.chat import OpenAIChatModel  # noqa: E402
from agent.server.kv_cache import PrefixCache  # noqa: E402
from agent.server.kv_store import KVCacheStore  # noqa: E402
from agent.server.launcher import ServerState, start_server, stop_server  # noqa: E402
from agent.server.presets import PresetRequest, build_preset  # noqa: E402
from tools.registry import default_registry  # noqa: E402

from support.llama_fixtures import free_port  # noqa: E402

TOOLS = default_registry().schemas()


class Sample(BaseModel):
    mode: str
    wall_s: float
    prompt_tokens: int
    cached_tokens: int
    restored_tokens: int | None = None
    restore_ms: float | None = None
    saved_tokens: int | None = None


def system_text(api: LlamaServerAPI, tokens: int) -> str:
    """This repository's sources, file after file, cut to about `tokens` tokens of SmolLM2's tokenizer."""
    pieces = [f"## {path.relative_to(ROOT)}\n{path.read_text()}" for path in sorted((ROOT / "agent").rglob("*.py"))]
    text = "You refactor code. The repository follows.\n" + "\n".join(pieces)
    counted = api.tokenize(text)
    ratio = len(text) / len(counted)
    return text[: int(tokens * ratio)]


def first_request(cache: PrefixCache, url: str, system: str, question: str, mode: str) -> Sample:
    sampling = SamplingConfig(max_tokens=1, seed=1, temperature=0.0)
    config = LLMConfig(server_url=url, sampling=sampling, max_retries=0, request_timeout_s=3600)
    events: list[PrefixCacheEvent] = []
    cache.notify = events.append
    model = cache.wrap(OpenAIChatModel(config, slot=cache.slot))
    started = time.monotonic()
    reply = model.complete([{"role": "system", "content": system}, {"role": "user", "content": question}], TOOLS)
    wall = time.monotonic() - started
    restored = [event for event in events if event.action == "restored"]
    saved = [event for event in events if event.action == "saved"]
    return Sample(
        mode=mode,
        wall_s=round(wall, 3),
        prompt_tokens=reply.stats.prompt_tokens,
        cached_tokens=reply.stats.cached_tokens,
        restored_tokens=restored[0].tokens if restored else None,
        restore_ms=restored[0].ms if restored else None,
        saved_tokens=saved[0].tokens if saved else None,
    )


def started(save_dir: Path, state_dir: Path) -> ServerState:
    request = PresetRequest(
        port=free_port(),
        parallel=2,
        slot_save_path=save_dir,
        extra_args=["--chat-template-file", str(find_chat_template())],
    )
    return start_server(build_preset(request), binary=find_binary(), state_dir=state_dir, log=lambda _line: None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=5000)
    arguments = parser.parse_args()
    save_dir, state_dir = OUT / "kv-cache", OUT / "kv-state"
    shutil.rmtree(save_dir, ignore_errors=True)
    samples: list[Sample] = []
    system = ""
    for server in ("first", "restarted"):
        state = started(save_dir, state_dir)
        try:
            with LlamaServerAPI(state.url, timeout_s=600.0) as api:
                system = system or system_text(api, arguments.tokens)
                cache = PrefixCache.for_server(api, settings="max", notify=lambda _event: None, state_dir=state_dir)
                assert cache is not None
                runs = [("cold", 0), ("another slot", 1)] if server == "first" else [("after a restart", 0)]
                for mode, slot in runs:
                    question = f"Task ({mode}): which module comes first?"
                    samples.append(first_request(cache.for_slot(slot), state.url, system, question, mode))
                    print(samples[-1].model_dump_json(), flush=True)
        finally:
            stop_server(state.port, state_dir=state_dir, log=lambda _line: None)
    (entry,) = KVCacheStore(save_dir).entries()
    result = {
        "samples": [sample.model_dump() for sample in samples],
        "saved_tokens": entry.n_tokens,
        "saved_bytes": entry.bytes,
        "bytes_per_token": round(entry.bytes / entry.n_tokens),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "kv_cache.json").write_text(json.dumps(result, indent=2))
    print("| first request | wall s | prompt tokens | cached | restored tokens | restore ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for sample in samples:
        restored = f"{sample.restored_tokens:,}" if sample.restored_tokens is not None else "–"
        restore = f"{sample.restore_ms:.0f}" if sample.restore_ms is not None else "–"
        print(
            f"| {sample.mode} | {sample.wall_s:.2f} | {sample.prompt_tokens:,} | {sample.cached_tokens:,} | "
            f"{restored} | {restore} |"
        )
    print(
        f"saved file: {entry.n_tokens:,} tokens, {entry.bytes:,} bytes, {result['bytes_per_token']:,} bytes per token"
    )


if __name__ == "__main__":
    main()
