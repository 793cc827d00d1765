"""DeepSeek V4 acceptance: what a machine that holds the real model measures before nights are trusted to it, and
the same figures today on the embedded server rendering V4's own chat template.

    .venv/bin/python bench/v4_acceptance.py [--turns 30]                      # embedded, runnable on any machine
    .venv/bin/python bench/v4_acceptance.py --server http://127.0.0.1:8080 [--turns 30] [--server-log FILE]

Embedded (the default): starts SmolLM2-135M with DeepSeek V4 Flash 0731's template (`--chat-template-file`, the
file setup keeps) and plays a scripted task's replies through it (tests/support/played_server.py: the real server
continues each scripted reply, its real DSML parser hands it to the product): the product's loop, streaming
client, tools, ledger and saved prefixes run unchanged. Every figure is then the server side of a V4 night (what
the template renders, what the cache reuses), never a V4 model's; the output says so.
`--server URL`: a DeepSeek V4 server started with `refactor-agent server start --preset dspark` (so the run knows
its --slot-save-path). The product itself runs the suite's task there (`refactor-agent run`, real replies, the
Docker sandbox), then once more on an erased slot for the restore figures.

Each step is a key of the JSON written to --json (default bench/out/v4_acceptance.json, for docs/benchmarks.md),
and a table on stdout:
- `template`: the chat template the server renders with (V4 Flash 0731's kept file or not), whether thinking is on
  (the rendered prompt ends in `<think>`), the effort preamble (what max effort puts before the system text), build.
- `turns`: per request, from the run's transcript: prompt, cached and generated tokens, what the slot held after the
  previous reply (its prompt and all it generated but the last token sampled) and the reuse: `first` (a task's
  first request: what the saved prefix gave), `exact` (all it held, but one token a tokenizer may join across the
  turn's end), `checkpoint` (some of it: V4 rolled back to a context checkpoint), `none`. `checkpoint_hits` counts
  them; with `--server-log` (the server run with `--log-file FILE -lv 4`) its own "restored context checkpoint"
  lines are counted too (b11434 logs them at trace level only, tools/server/server-context.cpp).
- `restore`: the shared prefix's tokens (computed from the template), the saved file's tokens and bytes, then a next
  task's first request on an erased slot (and, embedded, after a restart of the server): tokens restored, restore
  time, tokens cached.
- `dspark`: `/metrics` over the task: drafts, drafted and accepted tokens, accepted tokens per verification pass,
  acceptance per draft position (the embedded server runs no drafter: played replies generate one token each).
- `compaction`: not measured by this checkout yet (the conversation's compaction, issue 21 §3, is not in it).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
SUITE = ROOT / "bench" / "refactor-suite"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from agent.loop import AgentLoop  # noqa: E402
from agent.packing import PackOptions, pack_repository  # noqa: E402
from agent.prompt import task_prompt  # noqa: E402
from agent.protocol.config import LLMConfig  # noqa: E402
from agent.protocol.effort import Effort  # noqa: E402
from agent.protocol.events import Event, PrefixCacheEvent, Response, TaskEnd, parse_event  # noqa: E402
from agent.protocol.stats import SpecCounters  # noqa: E402
from agent.record.journal import RunJournal  # noqa: E402
from agent.server.api import LlamaServerAPI  # noqa: E402
from agent.server.binary import find_binary, find_chat_template  # noqa: E402
from agent.server.chat import OpenAIChatModel, chat_body  # noqa: E402
from agent.server.kv_cache import PrefixCache  # noqa: E402
from agent.server.kv_store import KVCacheStore  # noqa: E402
from agent.server.launcher import ServerState, find_state, start_server, stop_server  # noqa: E402
from agent.server.metrics import accepted_per_position, spec_counters_from_text  # noqa: E402
from agent.server.presets import PresetRequest, build_preset  # noqa: E402
from agent.server.rendering import Rendering  # noqa: E402
from prompts import load_prompt  # noqa: E402
from tools.base import ToolContext  # noqa: E402
from tools.ledger import Ledger, old_names_in  # noqa: E402
from tools.registry import default_registry  # noqa: E402

from support.dsml import Reply, invoke  # noqa: E402
from support.llama_fixtures import free_port  # noqa: E402
from support.local_sandbox import LocalExecutor  # noqa: E402
from support.played_server import PlayedServer  # noqa: E402
from support.repos import git  # noqa: E402
from support.template_checks import divergences  # noqa: E402

REPOSITORY = "geo_refactor"
TASK = (SUITE / "problems" / "base_problems" / REPOSITORY / "rename-haversine-task.txt").read_text().strip()
EFFORT: Effort = "max"
CHECKPOINT_LINE = "restored context checkpoint"  # tools/server/server-context.cpp, logged at trace level (-lv 4)
EMBEDDED = (
    "embedded: SmolLM2-135M rendering DeepSeek V4 Flash 0731's template, replies played: the server side of each "
    "figure (what the template renders, what the cache reuses), not a V4 model's"
)
NO_COMPACTION = "not measured: this checkout does not compact conversations yet (issue 21 §3)"
# Lines each played `view_file` shows: a turn then adds about 260 tokens (its reasoning, the call as DSML, the
# result), so a 30-turn task outgrows the embedded server's 8,192-token window after about 16 turns.
VIEW_LINES = 3
Reuse = Literal["first", "exact", "checkpoint", "none"]


class Turn(BaseModel):
    turn: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    held: int | None  # what the slot held after the previous reply
    reuse: Reuse


class FirstRequest(BaseModel):
    """A task's first request on a slot that did not hold its prefix: what the saved file gave it."""

    after: str  # what emptied the slot: "an erase", "a restart"
    restored_tokens: int | None
    restore_ms: float | None
    prompt_tokens: int
    cached_tokens: int


class RestoreFigures(BaseModel):
    shared_prefix_tokens: int | None  # from the template (embedded); the saved file's on a server of its own
    saved_tokens: int | None
    file_bytes: int | None
    first_requests: list[FirstRequest]


class DsparkFigures(BaseModel):
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    acceptance_rate: float | None
    accepted_per_pass: float | None
    acceptance_per_position: list[float]


class TemplateFigures(BaseModel):
    template: str
    v4_flash_0731: bool
    thinking: bool
    effort_preamble_chars: int  # what max effort puts before the system text, beyond what low effort does
    build: str


class Acceptance(BaseModel):
    mode: Literal["server", "embedded"]
    what: str
    server: str
    template: TemplateFigures
    ended: str  # how the measured task ended: its outcome and reason
    turns: list[Turn]
    checkpoint_hits: int
    checkpoint_log_lines: int | None
    divergences: int | None  # embedded: requests that did not extend what the slot held (tests/support)
    restore: RestoreFigures
    dspark: DsparkFigures | str
    compaction: str


# --- the steps, on any server ------------------------------------------------------------------------------------


def measure_template(api: LlamaServerAPI) -> TemplateFigures:
    """The template from /props, thinking from the rendering's end, the preamble from two efforts' renderings."""
    props = api.props()
    kept = find_chat_template()
    served = str(props.get("chat_template") or "")
    is_kept = served.strip() == kept.read_text().strip()
    marker = "SYSTEM-TEXT-MARKER"
    messages = [{"role": "system", "content": marker}, {"role": "user", "content": "Hello."}]
    tools = default_registry().schemas()
    rendered = {effort: api.apply_template(chat_body(messages, tools, effort)) for effort in ("max", "low")}
    heads = {effort: prompt.split(marker, 1)[0] for effort, prompt in rendered.items()}
    return TemplateFigures(
        template=f"DeepSeek V4 Flash 0731 ({kept.name})" if is_kept else f"another template ({len(served):,} chars)",
        v4_flash_0731=is_kept,
        thinking=rendered["max"].rstrip().endswith("<think>"),
        effort_preamble_chars=len(heads["max"]) - len(heads["low"]),
        build=str(props.get("build_info", "unknown")),
    )


def read_events(transcript: Path) -> list[Any]:
    return [parse_event(line) for line in transcript.read_bytes().splitlines() if line.strip()]


def classify(cached: int, held: int | None) -> Reuse:
    if held is None:
        return "first"
    if cached == 0:
        return "none"
    # The slot keeps all a reply generated but the last token sampled; a tokenizer may join one more across the
    # turn's end (SmolLM2's BPE: the last character with the `<` of the end-of-sentence marker).
    return "exact" if cached >= held - 1 else "checkpoint"


def turns_of(events: list[Any]) -> list[Turn]:
    """Per request of one task, what it reused of what the slot held after the previous reply."""
    turns: list[Turn] = []
    for event in events:
        if not isinstance(event, Response):
            continue
        previous = turns[-1] if turns else None
        held = previous.prompt_tokens + previous.completion_tokens - 1 if previous else None
        stats = event.stats
        turns.append(
            Turn(
                turn=event.turn,
                prompt_tokens=stats.prompt_tokens,
                cached_tokens=stats.cached_tokens,
                completion_tokens=stats.completion_tokens,
                held=held,
                reuse=classify(stats.cached_tokens, held),
            )
        )
    return turns


def first_request(events: list[Any], after: str) -> FirstRequest:
    restored = next((e for e in events if isinstance(e, PrefixCacheEvent) and e.action == "restored"), None)
    response = next(e for e in events if isinstance(e, Response))
    return FirstRequest(
        after=after,
        restored_tokens=restored.tokens if restored else None,
        restore_ms=restored.ms if restored else None,
        prompt_tokens=response.stats.prompt_tokens,
        cached_tokens=response.stats.cached_tokens,
    )


def saved_tokens(events: list[Any]) -> int | None:
    saved = [event.tokens for event in events if isinstance(event, PrefixCacheEvent) and event.action == "saved"]
    return max(saved) if saved else None


def file_bytes(save_dir: Path | None, tokens: int | None) -> int | None:
    if save_dir is None or tokens is None:
        return None
    sizes = [entry.bytes for entry in KVCacheStore(save_dir).entries() if entry.n_tokens == tokens]
    return sizes[0] if sizes else None


def spec_delta(before: str | None, after: str | None) -> DsparkFigures | str:
    if before is None or after is None:
        return "not measured: the server runs without --metrics"
    counters: SpecCounters = spec_counters_from_text(after) - spec_counters_from_text(before)
    if not counters.drafts:
        return "not measured: the server drafted nothing (no drafter, or replies too short to draft)"
    earlier = accepted_per_position(before)
    positions = [
        now - (earlier[index] if index < len(earlier) else 0.0)
        for index, now in enumerate(accepted_per_position(after))
    ]
    return DsparkFigures(
        drafts=counters.drafts,
        draft_tokens=counters.draft_tokens,
        accepted_tokens=counters.accepted_tokens,
        acceptance_rate=counters.acceptance_rate,
        accepted_per_pass=counters.accepted_per_pass,
        acceptance_per_position=[round(value / counters.drafts, 4) for value in positions],
    )


def fixture_repository(directory: Path) -> Path:
    """The suite's fixture repository, committed once (what `run` and the packer read)."""
    repo = directory / REPOSITORY
    shutil.copytree(SUITE / "repositories" / REPOSITORY, repo)
    identity = ("-c", "user.email=bench@example.com", "-c", "user.name=bench")
    git(repo, "init", "-q", "-b", "main")
    git(repo, *identity, "add", "-A")
    git(repo, *identity, "commit", "-q", "-m", "fixture")
    return repo


# --- embedded: replies played through SmolLM2 with V4's template -------------------------------------------------


def played_script(repo: Path, turns: int) -> list[Reply]:
    """`turns` requests: a few lines of the repository's files, one view after another, then a plain answer."""
    files = sorted(str(path.relative_to(repo)) for path in repo.rglob("*.py") if ".git" not in path.parts)
    views = []
    for number in range(turns - 1):
        start = 1 + (number // len(files)) * VIEW_LINES
        path = files[number % len(files)]
        call = invoke("view_file", path=path, start_line=start, end_line=start + VIEW_LINES - 1)
        views.append(Reply(f"Turn {number + 1}: lines {start}- of {path}.", calls=(call,)))
    return [*views, Reply("I have read enough.", content="Nothing to change yet.")]


def played_task(played: PlayedServer, cache: PrefixCache, repo: Path, system: str, journal: RunJournal) -> str:
    """One task through the product's loop on the played server, its events written as a run writes them; how
    it ended."""
    config = LLMConfig(server_url=played.url, max_retries=0, effort=EFFORT, request_timeout_s=3600)
    model = cache.wrap(OpenAIChatModel(config, slot=cache.slot))
    context = ToolContext(LocalExecutor(repo), None, 30, 20_000, ledger=Ledger(old_names_in(TASK)))

    def emit(event: Event) -> None:
        journal.record(event.model_copy(update={"task": 0}))

    cache.notify = emit
    loop = AgentLoop(model, default_registry(), context, max_turns=len(played.script), emit=emit)
    result = loop.run(system, task_prompt(TASK, None))
    journal.close()
    return f"{result.outcome}: {result.reason}"


@contextmanager
def embedded_server(work: Path) -> Iterator[ServerState]:
    # No drafter: played replies generate one token each, so it would draft nothing and only double the prefill.
    request = PresetRequest(
        port=free_port(),
        slot_save_path=work / "slots",
        extra_args=["--chat-template-file", str(find_chat_template())],
    )
    state = start_server(build_preset(request), binary=find_binary(), state_dir=work / "state", log=lambda _: None)
    try:
        yield state
    finally:
        stop_server(state.port, state_dir=work / "state", log=lambda _: None)


def embedded(turns: int) -> Acceptance:
    with tempfile.TemporaryDirectory(prefix="v4-acceptance-") as scratch:
        work = Path(scratch)
        repo = fixture_repository(work)
        system = f"{load_prompt('system').rstrip()}\n\n{pack_repository(repo, PackOptions()).text}"
        tools = default_registry().schemas()

        def task(state: ServerState, name: str, script: list[Reply]) -> tuple[list[Any], list, str]:
            with LlamaServerAPI(state.url, timeout_s=600.0) as api:
                cache = PrefixCache.for_server(api, settings=EFFORT, notify=lambda _: None, state_dir=work / "state")
                assert cache is not None, "the embedded server saves slots (--slot-save-path)"
                journal = RunJournal(work / "runs", name)
                with PlayedServer(state.url, script) as played:
                    ended = played_task(played, cache.for_slot(0), repo, system, journal)
                    return read_events(journal.directory / "transcript.jsonl"), list(played.exchanges), ended

        with embedded_server(work) as state, LlamaServerAPI(state.url, timeout_s=600.0) as api:
            template = measure_template(api)
            shared = len(Rendering(api, EFFORT).shared_prefix(system, tools))
            before = api.metrics_text()
            events, exchanges, ended = task(state, "task", played_script(repo, turns))
            after = api.metrics_text()
            api.slot_action(0, "erase")  # a cold slot: the next task's first request restores the prefix
            erased, _, _ = task(state, "after-erase", played_script(repo, 1))
        with embedded_server(work) as restarted:  # another server process on the same files: nothing resident
            after_restart, _, _ = task(restarted, "after-restart", played_script(repo, 1))
        saved = saved_tokens(events)
        turn_rows = turns_of(events)
        return Acceptance(
            mode="embedded",
            what=EMBEDDED,
            server=state.url,
            template=template,
            ended=ended,
            turns=turn_rows,
            checkpoint_hits=sum(row.reuse == "checkpoint" for row in turn_rows),
            checkpoint_log_lines=None,
            divergences=len(divergences(exchanges)),
            restore=RestoreFigures(
                shared_prefix_tokens=shared,
                saved_tokens=saved,
                file_bytes=file_bytes(work / "slots", saved),
                first_requests=[first_request(erased, "an erase"), first_request(after_restart, "a restart")],
            ),
            dspark=spec_delta(before, after),
            compaction=NO_COMPACTION,
        )


# --- --server: the product's own run on a real server ------------------------------------------------------------


def product_run(url: str, repo: Path, runs: Path, turns: int) -> list[Any]:
    """`refactor-agent run` of the task (its verdict does not matter here), and its transcript's events."""
    command = [
        sys.executable, "-m", "agent", "run", str(repo), "--task", TASK, "--server", url, "--runs-dir", str(runs),
        "--max-turns", str(turns), "--effort", EFFORT,
    ]  # fmt: skip
    subprocess.run(command, cwd=ROOT, check=False)
    (transcript,) = runs.glob("*/transcript.jsonl")  # a runs directory of its own: this run's
    return read_events(transcript)


def ended_of(events: list[Any]) -> str:
    ends = [event.outcome for event in events if isinstance(event, TaskEnd)]
    return f"{ends[0].status}: {ends[0].reason}" if ends else "the run recorded no task end"


def against_server(url: str, turns: int, log: Path | None) -> Acceptance:
    port = urlsplit(url).port
    state = find_state(port) if port is not None else None
    save_dir = state.slot_save_path if state is not None else None
    with tempfile.TemporaryDirectory(prefix="v4-acceptance-") as scratch, LlamaServerAPI(url, timeout_s=3600.0) as api:
        work = Path(scratch)
        repo = fixture_repository(work)
        template = measure_template(api)
        before = api.metrics_text()
        events = product_run(url, repo, work / "runs-task", turns)
        after = api.metrics_text()
        api.slot_action(0, "erase")
        erased = product_run(url, repo, work / "runs-after-erase", 1)
        saved = saved_tokens(events)
        turn_rows = turns_of(events)
        return Acceptance(
            mode="server",
            what=f"the product's run of {REPOSITORY}'s task on {url}",
            server=url,
            template=template,
            ended=ended_of(events),
            turns=turn_rows,
            checkpoint_hits=sum(row.reuse == "checkpoint" for row in turn_rows),
            checkpoint_log_lines=log.read_text(errors="replace").count(CHECKPOINT_LINE) if log is not None else None,
            divergences=None,
            restore=RestoreFigures(
                shared_prefix_tokens=saved,
                saved_tokens=saved,
                file_bytes=file_bytes(save_dir, saved),
                first_requests=[first_request(erased, "an erase")],
            ),
            dspark=spec_delta(before, after),
            compaction=NO_COMPACTION,
        )


# --- the report --------------------------------------------------------------------------------------------------


def _count(value: int | float | None) -> str:
    return "–" if value is None else f"{value:,}"


def markdown(result: Acceptance) -> str:
    template, restore = result.template, result.restore
    lines = [
        result.what,
        f"template: {template.template}; thinking {'on' if template.thinking else 'off'}; max effort's preamble "
        f"{template.effort_preamble_chars:,} characters; build {template.build}",
        "",
        "| turn | prompt tokens | cached | generated | the slot held | reuse |",
        "| ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    lines += [
        f"| {row.turn} | {row.prompt_tokens:,} | {row.cached_tokens:,} | {row.completion_tokens:,} | "
        f"{_count(row.held)} | {row.reuse} |"
        for row in result.turns
    ]
    later = [row for row in result.turns if row.held is not None]
    lines += [
        "",
        f"the task ended {result.ended}",
        f"{sum(row.reuse == 'exact' for row in later)} of {len(later)} requests after the first reused all the slot "
        f"held (but a token the tokenizer joined across the turn's end); checkpoint hits {result.checkpoint_hits}"
        + (f" ({result.checkpoint_log_lines} in the server's log)" if result.checkpoint_log_lines is not None else ""),
    ]
    if result.divergences is not None:
        lines.append(f"requests that did not extend what the slot held: {result.divergences}")
    lines += [
        f"saved prefix: {_count(restore.saved_tokens)} tokens (the shared prefix: "
        f"{_count(restore.shared_prefix_tokens)}), {_count(restore.file_bytes)} bytes",
        "",
        "| next task's first request, after | restored tokens | restore ms | prompt tokens | cached |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {first.after} | {_count(first.restored_tokens)} | "
        f"{'–' if first.restore_ms is None else f'{first.restore_ms:.0f}'} | {first.prompt_tokens:,} | "
        f"{first.cached_tokens:,} |"
        for first in restore.first_requests
    ]
    dspark = result.dspark
    lines += [
        "",
        f"dspark: {dspark}"
        if isinstance(dspark, str)
        else f"dspark: {dspark.drafts:,} drafts, {dspark.accepted_tokens:,} of {dspark.draft_tokens:,} drafted "
        f"tokens accepted ({dspark.acceptance_rate}), {dspark.accepted_per_pass} per pass, by position "
        f"{dspark.acceptance_per_position}",
        f"compaction: {result.compaction}",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", help="a DeepSeek V4 server's URL: the product runs a task there")
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--json", type=Path, default=OUT / "v4_acceptance.json")
    parser.add_argument("--server-log", type=Path, help="the server's --log-file (with -lv 4): checkpoint lines")
    arguments = parser.parse_args()
    if arguments.turns < 1:
        parser.error("--turns must be at least 1")
    if arguments.server_log is not None and arguments.server is None:
        parser.error("--server-log goes with --server")
    if arguments.server is None:
        result = embedded(arguments.turns)
    else:
        result = against_server(arguments.server, arguments.turns, arguments.server_log)
    arguments.json.parent.mkdir(parents=True, exist_ok=True)
    arguments.json.write_text(result.model_dump_json(indent=2))
    print(markdown(result))


if __name__ == "__main__":
    main()
