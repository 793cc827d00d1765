"""Time to first token with a saved prefix restored, against a cold prefill of the same prompt, on a real llama-server.

    .venv/bin/python bench/kv_cache.py [--tokens 7600] [--repeats 3]

Starts the embedded preset (SmolLM2-135M on CPU, 8192-token window) with --slot-save-path in bench/out/kv-cache,
builds a system prompt of about --tokens tokens from this repository's own Python sources, and measures:
cold (empty slot, the whole prompt prefilled, then saved as the runner does after a task's first request), and
restored (a server restarted in between, so nothing is resident: the runner's PrefixCache finds the saved file,
checks its checksum, restores it, and the request prefills only the new question). Each time is the wall time of
the first request of a task with max_tokens 1, from the call to its answer (restore included), plus the server's
own prompt time. Writes bench/out/kv_cache.json and prints a Markdown table.
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
from agent.server.binary import find_binary  # noqa: E402
from agent.server.chat import OpenAIChatModel  # noqa: E402
from agent.server.kv_cache import KVCacheStore, PrefixCache  # noqa: E402
from agent.server.launcher import start_server, stop_server  # noqa: E402
from agent.server.presets import PresetRequest, build_preset  # noqa: E402

from support.llama_fixtures import free_port  # noqa: E402


class Sample(BaseModel):
    mode: str
    wall_s: float
    prompt_tokens: int
    cached_tokens: int
    server_prompt_ms: float | None
    restore_ms: float | None = None


def system_text(api: LlamaServerAPI, tokens: int) -> str:
    """This repository's sources, file after file, cut to about `tokens` tokens of SmolLM2's tokenizer."""
    pieces = [f"## {path.relative_to(ROOT)}\n{path.read_text()}" for path in sorted((ROOT / "agent").rglob("*.py"))]
    text = "You refactor code. The repository follows.\n" + "\n".join(pieces)
    counted = api.tokenize(text)
    ratio = len(text) / len(counted)
    return text[: int(tokens * ratio)]


def one_request(url: str, cache: PrefixCache, system: str, question: str, mode: str) -> Sample:
    config = LLMConfig(server_url=url, sampling=SamplingConfig(max_tokens=1, seed=1, temperature=0.0), max_retries=0)
    events: list[PrefixCacheEvent] = []
    cache.notify = events.append
    model = cache.wrap(OpenAIChatModel(config))
    started = time.monotonic()
    reply = model.complete([{"role": "system", "content": system}, {"role": "user", "content": question}], [])
    wall = time.monotonic() - started
    restored = [event.ms for event in events if event.action == "restored"]
    return Sample(
        mode=mode,
        wall_s=round(wall, 3),
        prompt_tokens=reply.stats.prompt_tokens,
        cached_tokens=reply.stats.cached_tokens,
        server_prompt_ms=reply.stats.prompt_ms,
        restore_ms=restored[0] if restored else None,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=7600)
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    save_dir = OUT / "kv-cache"
    shutil.rmtree(save_dir, ignore_errors=True)
    state_dir = OUT / "kv-state"
    binary = find_binary()
    samples: list[Sample] = []
    system = ""
    for repeat in range(arguments.repeats):
        # Cold: a new save directory's worth of nothing, a fresh server.
        shutil.rmtree(save_dir, ignore_errors=True)
        for mode in ("cold", "restored"):
            preset = build_preset(PresetRequest(port=free_port(), slot_save_path=save_dir))
            state = start_server(preset, binary=binary, state_dir=state_dir, log=lambda _line: None)
            try:
                with LlamaServerAPI(state.url, timeout_s=600.0) as api:
                    system = system or system_text(api, arguments.tokens)
                    cache = PrefixCache.for_server(api, settings="max", notify=lambda _event: None, state_dir=state_dir)
                    assert cache is not None
                    question = f"Question {repeat} ({mode}): which module comes first?"
                    samples.append(one_request(state.url, cache, system, question, mode))
                    print(samples[-1].model_dump_json(), flush=True)
            finally:
                stop_server(state.port, state_dir=state_dir, log=lambda _line: None)
    (entry,) = KVCacheStore(save_dir).entries()
    result = {
        "samples": [sample.model_dump() for sample in samples],
        "saved_tokens": entry.tokens,
        "saved_bytes": entry.bytes,
        "bytes_per_token": round(entry.bytes / entry.tokens),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "kv_cache.json").write_text(json.dumps(result, indent=2))
    print("| mode | wall s (first request, max_tokens 1) | prompt tokens | cached | server prompt ms | restore ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for sample in samples:
        restore = f"{sample.restore_ms:.0f}" if sample.restore_ms is not None else "–"
        print(
            f"| {sample.mode} | {sample.wall_s:.2f} | {sample.prompt_tokens:,} | {sample.cached_tokens:,} | "
            f"{sample.server_prompt_ms or 0:.0f} | {restore} |"
        )
    print(f"saved file: {entry.tokens:,} tokens, {entry.bytes:,} bytes, {result['bytes_per_token']:,} bytes per token")


if __name__ == "__main__":
    main()
