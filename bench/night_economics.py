"""Issue 14's measurements in one run: every benchmark behind "Prefill once per night" in docs/benchmarks.md, one
after the other on the same machine, then one summary table.

    .venv/bin/python bench/night_economics.py [--quick]

In order: exact-count packs of Django beside repomix (bench/pack.py, cold and warm); the share of the packed prefix
kept between consecutive commits, path order against churn order (bench/prefix_stability.py, this repository's
last 30 commits and Django's releases); time to first token cold against a restored KV cache (bench/kv_cache.py);
prefill and decode throughput with 1 and 2 slots (bench/parallel_slots.py); tasks per hour on one server with 1 and
2 slots, two servers and a local Ray cluster (bench/fleet.py). The first two count tokens with an embedded
llama-server started here; the others start what they need. Each benchmark's own table and log go to
bench/out/night_economics/; the summary goes to bench/out/night_economics.json and stdout. --quick: one repeat
each where a benchmark repeats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
LOGS = OUT / "night_economics"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from agent.server.binary import find_binary  # noqa: E402
from agent.server.launcher import start_server, stop_server  # noqa: E402
from agent.server.presets import PresetRequest, build_preset  # noqa: E402

from support.llama_fixtures import free_port  # noqa: E402


def bench(name: str, *arguments: str) -> float:
    """One benchmark as its own process; its output is kept in LOGS/<name>.log and shown as it comes."""
    LOGS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with (LOGS / f"{name}.log").open("w") as log:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / f"{name}.py"), *arguments],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            print(f"[{name}] {line}", end="", flush=True)
        if process.wait() != 0:
            raise SystemExit(f"bench/{name}.py failed (exit {process.returncode}): see {LOGS / name}.log")
    return round(time.monotonic() - started, 1)


def _json(name: str) -> Any:
    return json.loads((OUT / name).read_text())


def summarize() -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    packs = {row["tool"]: row for row in _json("pack.json") if row["corpus"] == "django"}
    repomix = next(row for tool, row in packs.items() if tool.startswith("repomix"))
    for mode in ("cold", "warm"):
        exact = packs[f"refactor-agent (exact) {mode}"]
        rows.append(
            (
                f"§5 Django pack, exact counts, {mode}",
                f"{exact['wall_s']:.2f} s, {exact['peak_rss_mb']:.0f} MB",
                f"repomix {repomix['wall_s']:.2f} s (ratio {exact['wall_s'] / repomix['wall_s']:.2f})",
            )
        )
    stability = _json("prefix_stability_1000000.json")
    for history in dict.fromkeys(row["history"] for row in stability):
        share = {
            order: statistics.mean(
                row["kept"] / row["total"] for row in stability if row["history"] == history and row["order"] == order
            )
            for order in ("path", "churn")
        }
        rows.append(
            (
                f"§1 prefix kept between commits, {history}",
                f"churn order {share['churn']:.1%}",
                f"path order {share['path']:.1%}",
            )
        )
    kv = _json("kv_cache.json")
    for mode in ("cold", "restored"):
        walls = [sample["wall_s"] for sample in kv["samples"] if sample["mode"] == mode]
        rows.append(
            (
                f"§2 time to first token, {mode}",
                " / ".join(f"{wall:.2f} s" for wall in walls),
                f"{kv['saved_tokens']:,} tokens, {kv['bytes_per_token']:,} bytes per token on disk",
            )
        )
    batches = [batch for batch in _json("parallel_slots.json")["batches"] if batch["kv"] == "split"]
    for slots in dict.fromkeys(batch["slots"] for batch in batches):
        mine = [batch for batch in batches if batch["slots"] == slots]
        rows.append(
            (
                f"§3 embedded model, {slots} slot(s), {slots} request(s) at once",
                " / ".join(
                    f"prefill {batch['prefill_tokens_per_s']:.0f} tok/s, decode {batch['decode_tokens_per_s']:.1f} "
                    "tok/s"
                    for batch in mine
                ),
                " / ".join(f"batch {batch['wall_s']:.1f} s (load {batch['load_1min']})" for batch in mine),
            )
        )
    for result in _json("fleet.json")["results"]:
        rows.append(
            (
                f"§3/§4 tasks per hour, {result['configuration']}",
                f"{result['tasks_per_hour']} tasks/h",
                f"{result['committed']}/{result['tasks']} committed in {result['wall_s']} s",
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat where a benchmark repeats")
    options = parser.parse_args()
    repeats = "1" if options.quick else "2"
    seconds: dict[str, float] = {}
    state_dir = OUT / "night-economics-state"
    preset = build_preset(PresetRequest(port=free_port(), slot_save_path=OUT / "night-economics-kv"))
    state = start_server(preset, binary=find_binary(), state_dir=state_dir, log=lambda _line: None)
    try:
        seconds["pack"] = bench("pack", "--server", state.url, "--corpus", "django", "--skip-gitingest")
        seconds["prefix_stability"] = bench("prefix_stability", "--server", state.url)
    finally:
        stop_server(state.port, state_dir=state_dir, log=lambda _line: None)
    seconds["kv_cache"] = bench("kv_cache", "--repeats", repeats)
    seconds["parallel_slots"] = bench("parallel_slots", "--repeats", repeats)
    seconds["fleet"] = bench("fleet")
    rows = summarize()
    (OUT / "night_economics.json").write_text(
        json.dumps({"rows": [list(row) for row in rows], "bench_seconds": seconds}, indent=2) + "\n"
    )
    print("| measurement | refactor-agent | beside it |")
    print("|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"benchmark wall times (s): {json.dumps(seconds)}")


if __name__ == "__main__":
    main()
