"""Prefill and decode throughput of one llama-server with N slots, N requests at once, each pinned to its own slot.

    .venv/bin/python bench/parallel_slots.py [--slots 1 2] [--prompt-tokens 1500] [--max-tokens 64] [--repeats 2]
        [--window 2048] [--kv split unified] [--threads T] [--port 8116]

For each repeat and each N of --slots, starts the embedded preset (SmolLM2-135M on CPU) with N slots and a context
of N x --window, as a launcher with N slots would, then sends N /v1/chat/completions at the same moment from N
threads, request k pinned with `id_slot: k`, each with its own text of about --prompt-tokens tokens (this
repository's sources, a different stretch for every slot, so no prefix is shared) and `max_tokens` D with
`ignore_eos`, so every reply is D tokens long. Every batch runs on a freshly started server (cold slots, the same
prompts each time). --kv picks the KV layout: `split` passes --no-kv-unified (each slot owns its window), `unified`
passes --kv-unified (one pool shared by the slots; with one slot the two are the same, so it runs only for N > 1).
--threads passes llama-server's --threads (default: its own choice, as the launcher's presets leave it).

Per batch, on the timeline of the batch (0 = the moment the requests are released), where request k's prompt is done
at its reply's arrival minus the server's decode time for it (timings.predicted_ms): the wall time of the whole
batch; prefill throughput = all prompt tokens processed / the moment the last prompt was done (two prompts released
together are not necessarily prefilled together: one may start when the other is done); decode throughput = all
tokens generated / the time during which at least one slot was generating; per request the server's own prompt and
decode tokens per second. Checks, and fails loudly otherwise: the server has N slots of the expected context, every
reply is D tokens, and slot k holds request k's tokens afterwards.
Writes bench/out/parallel_slots.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
sys.path.insert(0, str(ROOT))

from agent.protocol.config import SamplingConfig  # noqa: E402
from agent.server.api import LlamaServerAPI  # noqa: E402
from agent.server.binary import find_binary  # noqa: E402
from agent.server.errors import ServerError  # noqa: E402
from agent.server.launcher import start_server, stop_server  # noqa: E402
from agent.server.presets import EMBEDDED_MAX_CTX, PresetRequest, ServerPreset, build_preset  # noqa: E402

KVLayout = Literal["split", "unified"]
KV_LAYOUTS: tuple[KVLayout, ...] = ("split", "unified")
# llama-server rounds each slot's share of a split cache up to a multiple of 256 tokens (llama-context.cpp).
CTX_PAD = 256
# Request k asks for PROMPT_STEP * k more tokens than request 0, so the slot check can tell the requests apart by
# the number of tokens each slot holds afterwards (the reply says nothing about its slot).
PROMPT_STEP = 16
# The chat template's own tokens around the user's text, and the first generated token, need room in the window.
TEMPLATE_ROOM = 64
REQUEST_TIMEOUT_S = 900.0


class BenchmarkFailed(Exception):
    """The server did not do what the benchmark measures (slots, pinning, reply length): the numbers would lie."""


class RequestSample(BaseModel):
    slot: int
    prompt_tokens: int
    cache_n: int
    prompt_n: int
    prompt_ms: float
    prompt_per_second: float
    predicted_n: int
    predicted_ms: float
    predicted_per_second: float
    wall_s: float
    prompt_done_s: float  # wall_s minus the decode time: when its prompt was processed, on the batch's timeline


class BatchSample(BaseModel):
    repeat: int
    slots: int
    kv: KVLayout
    n_ctx_slot: int
    load_1min: float  # the machine's load average when the batch started: the machine is shared
    wall_s: float
    prefill_s: float
    prefill_tokens_per_s: float
    decode_s: float
    decode_tokens_per_s: float
    requests: list[RequestSample]


def sources_text() -> str:
    """This repository's own Python sources, file after file: plenty of distinct text, the same on every run."""
    return "\n".join(
        f"## {path.relative_to(ROOT)}\n{path.read_text()}" for path in sorted((ROOT / "agent").rglob("*.py"))
    )


def longest_head(api: LlamaServerAPI, text: str, tokens: int) -> int:
    """The length in characters of the longest head of text that is at most `tokens` tokens (binary search)."""
    # Tokenizing the whole sources at every step would cost the shared machine seconds: bound the search first.
    high = min(len(text), tokens * 4)
    while high < len(text) and len(api.tokenize(text[:high])) <= tokens:
        high = min(len(text), high * 2)
    low = 0
    while low < high:
        middle = (low + high + 1) // 2
        if len(api.tokenize(text[:middle])) <= tokens:
            low = middle
        else:
            high = middle - 1
    return low


def build_prompts(api: LlamaServerAPI, count: int, prompt_tokens: int) -> list[str]:
    """`count` texts taken one after the other from the sources (no two share a prefix), text k exactly
    prompt_tokens + PROMPT_STEP * k tokens long."""
    text = sources_text()
    prompts: list[str] = []
    start = 0
    for index in range(count):
        rest = text[start:]
        end = longest_head(api, rest, prompt_tokens + PROMPT_STEP * index)
        if end == len(rest):
            raise BenchmarkFailed(f"the sources hold too little text for {count} prompts of {prompt_tokens} tokens")
        prompts.append(rest[:end])
        start += end
    return prompts


def request_body(prompt: str, slot: int, max_tokens: int) -> dict[str, Any]:
    sampling = SamplingConfig()  # the sampling every task of the project uses
    return {
        "messages": [{"role": "user", "content": prompt}],
        "id_slot": slot,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "min_p": sampling.min_p,
    }


def send_batch(url: str, prompts: list[str], max_tokens: int) -> tuple[list[dict[str, Any]], list[float], float]:
    """All requests released at the same moment, one thread each; their replies, wall times, and the batch's wall."""
    replies: list[dict[str, Any]] = [{} for _ in prompts]
    walls = [0.0 for _ in prompts]
    errors: list[BaseException] = []
    start = threading.Barrier(len(prompts) + 1)

    def one(slot: int) -> None:
        with LlamaServerAPI(url, timeout_s=REQUEST_TIMEOUT_S) as api:
            start.wait()
            began = time.monotonic()
            try:
                replies[slot] = api.chat_completion(request_body(prompts[slot], slot, max_tokens))
            except (ServerError, httpx.HTTPError) as error:
                errors.append(error)
            walls[slot] = time.monotonic() - began

    threads = [threading.Thread(target=one, args=(slot,)) for slot in range(len(prompts))]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.monotonic()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - began
    if errors:
        raise BenchmarkFailed(f"a request failed: {errors[0]}")
    return replies, walls, wall


def expected_slot_ctx(slots: int, window: int, kv: KVLayout) -> int:
    """What llama-server gives each slot: its share of a split cache, or the whole shared pool."""
    return window if kv == "split" else slots * window


def check_server(api: LlamaServerAPI, slots: int, expected_ctx: int) -> int:
    total = api.props()["total_slots"]
    listed = api.slots()
    contexts = sorted({slot["n_ctx"] for slot in listed})
    if total != slots or len(listed) != slots:
        raise BenchmarkFailed(f"asked for {slots} slots, the server has {total} ({len(listed)} listed)")
    if contexts != [expected_ctx]:
        raise BenchmarkFailed(f"expected {expected_ctx} tokens of context per slot, the slots have {contexts}")
    return expected_ctx


def check_replies(api: LlamaServerAPI, replies: list[dict[str, Any]], max_tokens: int) -> None:
    """Every reply D tokens long, and slot k holding exactly request k's prompt and reply afterwards."""
    held = {slot["id"]: slot.get("n_prompt_tokens") for slot in api.slots()}
    for slot, reply in enumerate(replies):
        usage = reply["usage"]
        if usage["completion_tokens"] != max_tokens or reply["choices"][0]["finish_reason"] != "length":
            raise BenchmarkFailed(
                f"slot {slot}: {usage['completion_tokens']} tokens generated "
                f"({reply['choices'][0]['finish_reason']}) instead of {max_tokens}: ignore_eos was not honoured"
            )
        # The slot keeps the prompt and every generated token but the last, which was never fed back.
        expected = usage["prompt_tokens"] + usage["completion_tokens"] - 1
        if held.get(slot) != expected:
            raise BenchmarkFailed(
                f"request {slot} was pinned to slot {slot} with {expected} tokens, but the slots hold {held}"
            )


def measure(reply: dict[str, Any], slot: int, wall: float) -> RequestSample:
    timings = reply["timings"]
    return RequestSample(
        slot=slot,
        prompt_tokens=reply["usage"]["prompt_tokens"],
        cache_n=timings["cache_n"],
        prompt_n=timings["prompt_n"],
        prompt_ms=timings["prompt_ms"],
        prompt_per_second=round(timings["prompt_per_second"], 1),
        predicted_n=timings["predicted_n"],
        predicted_ms=timings["predicted_ms"],
        predicted_per_second=round(timings["predicted_per_second"], 1),
        wall_s=round(wall, 3),
        prompt_done_s=round(wall - timings["predicted_ms"] / 1000, 3),
    )


def covered(spans: list[tuple[float, float]]) -> float:
    """The length of the union of the spans."""
    total, reached = 0.0, float("-inf")
    for start, end in sorted(spans):
        total += max(0.0, end - max(start, reached))
        reached = max(reached, end)
    return total


def summarise(
    repeat: int, slots: int, kv: KVLayout, n_ctx: int, load: float, requests: list[RequestSample], wall: float
) -> BatchSample:
    prefill_s = max(request.prompt_done_s for request in requests)
    # One slot may still be prefilling while another generates: count the time anything was generating.
    decode_s = covered([(request.prompt_done_s, request.wall_s) for request in requests])
    return BatchSample(
        repeat=repeat,
        slots=slots,
        kv=kv,
        n_ctx_slot=n_ctx,
        load_1min=round(load, 2),
        wall_s=round(wall, 3),
        prefill_s=round(prefill_s, 3),
        prefill_tokens_per_s=round(sum(request.prompt_n for request in requests) / prefill_s, 1),
        decode_s=round(decode_s, 3),
        decode_tokens_per_s=round(sum(request.predicted_n for request in requests) / decode_s, 1),
        requests=requests,
    )


def slots_preset(port: int, save_dir: Path, slots: int, window: int, kv: KVLayout, threads: int | None) -> ServerPreset:
    """What `server start --preset embedded --parallel N --ctx WINDOW` starts (N × window, a split cache), with
    the unified cache forced on for the comparison."""
    extra = [*(["--kv-unified"] if kv == "unified" else []), *(["--threads", str(threads)] if threads else [])]
    request = PresetRequest(port=port, slot_save_path=save_dir, parallel=slots, ctx_size=window, extra_args=extra)
    return build_preset(request)


class Options(BaseModel):
    slots: list[int]
    prompt_tokens: int
    max_tokens: int
    repeats: int
    window: int
    kv: list[KVLayout]
    threads: int | None
    port: int


def parse_options() -> Options:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 2], help="the numbers of slots N to measure")
    parser.add_argument("--prompt-tokens", type=int, default=1500, help="P, the prompt of request 0 in tokens")
    parser.add_argument("--max-tokens", type=int, default=64, help="D, the tokens every reply generates")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--window", type=int, default=2048, help="each slot's context in tokens")
    parser.add_argument("--kv", nargs="+", choices=list(KV_LAYOUTS), default=["split"], help="KV layouts to measure")
    parser.add_argument("--threads", type=int, help="llama-server's --threads (default: its own)")
    parser.add_argument("--port", type=int, default=8116)
    arguments = parser.parse_args()
    options = Options(**vars(arguments))
    largest = max(options.slots)
    needed = options.prompt_tokens + PROMPT_STEP * (largest - 1) + options.max_tokens + TEMPLATE_ROOM
    counts = [*options.slots, options.repeats, options.prompt_tokens, options.max_tokens]
    counts += [options.threads] if options.threads is not None else []
    if min(counts) < 1:
        parser.error("--slots, --repeats, --prompt-tokens, --max-tokens and --threads must be positive")
    if options.window % CTX_PAD or not needed <= options.window <= EMBEDDED_MAX_CTX:
        parser.error(
            f"--window must be a multiple of {CTX_PAD} between {needed} (prompt, reply and template) "
            f"and SmolLM2's {EMBEDDED_MAX_CTX}"
        )
    return options


def run(options: Options) -> list[BatchSample]:
    binary = find_binary()
    state_dir = OUT / "parallel-slots"
    configurations = [(slots, kv) for slots in options.slots for kv in options.kv if slots > 1 or kv == "split"]
    prompts: list[str] = []
    batches: list[BatchSample] = []
    for repeat in range(1, options.repeats + 1):
        for slots, kv in configurations:
            state = start_server(
                slots_preset(options.port, state_dir / "kv", slots, options.window, kv, options.threads),
                binary=binary,
                state_dir=state_dir,
                log=lambda _: None,
            )
            try:
                with LlamaServerAPI(state.url, timeout_s=60.0) as api:
                    n_ctx = check_server(api, slots, expected_slot_ctx(slots, options.window, kv))
                    prompts = prompts or build_prompts(api, max(options.slots), options.prompt_tokens)
                    load = os.getloadavg()[0]
                    replies, walls, wall = send_batch(state.url, prompts[:slots], options.max_tokens)
                    check_replies(api, replies, options.max_tokens)
            finally:
                stop_server(state.port, state_dir=state_dir, log=lambda _: None)
            requests = [measure(reply, slot, walls[slot]) for slot, reply in enumerate(replies)]
            batches.append(summarise(repeat, slots, kv, n_ctx, load, requests, wall))
            print(batches[-1].model_dump_json(exclude={"requests"}), flush=True)
    return batches


def table(batches: list[BatchSample]) -> str:
    lines = [
        "| repeat | N slots | KV | ctx per slot | prompt tokens | last prompt done s | prefill tok/s "
        "| any slot generating s | decode tok/s "
        "| per request: prompt tok/s | per request: decode tok/s | batch wall s | load |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|",
    ]
    for batch in batches:
        prompt = " / ".join(f"{request.prompt_per_second:.0f}" for request in batch.requests)
        decode = " / ".join(f"{request.predicted_per_second:.1f}" for request in batch.requests)
        tokens = sum(request.prompt_n for request in batch.requests)
        lines.append(
            f"| {batch.repeat} | {batch.slots} | {batch.kv} | {batch.n_ctx_slot:,} | {tokens:,} | "
            f"{batch.prefill_s:.2f} | {batch.prefill_tokens_per_s:.0f} | {batch.decode_s:.2f} | "
            f"{batch.decode_tokens_per_s:.1f} | {prompt} | {decode} | {batch.wall_s:.2f} | {batch.load_1min:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    options = parse_options()
    try:
        batches = run(options)
    except (BenchmarkFailed, ServerError, httpx.HTTPError) as error:
        print(f"parallel_slots: {error}", file=sys.stderr)
        sys.exit(1)
    OUT.mkdir(parents=True, exist_ok=True)
    result = {"options": options.model_dump(), "batches": [batch.model_dump() for batch in batches]}
    (OUT / "parallel_slots.json").write_text(json.dumps(result, indent=2))
    print(table(batches))


if __name__ == "__main__":
    main()
