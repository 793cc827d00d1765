"""DeepSeek V4 acceptance: what a machine that holds the real model measures before nights are trusted to it, and
the same figures today on the embedded server rendering V4's own chat template.

    .venv/bin/python bench/v4_acceptance.py [--turns 30] [--compact-at 0.85]  # embedded, runnable on any machine
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
- `template`: doctor's checks (agent/server/doctor_target.py): the chat template the server renders with (V4 Flash
  0731's kept file or not), whether thinking is on (the rendered prompt's end and a live reply's reasoning), max
  effort's preamble in the prompt, the build.
- `reuse_probe`: doctor's extension probe: tokens two requests share, and how many the server reused.
- `turns`: per request, from the run's transcript: prompt, cached and generated tokens, what the slot held after the
  previous reply (its prompt and all it generated but the last token sampled) and the reuse: `first` (a task's
  first request: what the saved prefix gave), `exact` (all it held, but one token a tokenizer may join across the
  turn's end), `checkpoint` (some of it: V4 rolled back to a context checkpoint), `compacted` (the first request
  after a compaction), `none`. `checkpoint_hits` counts them; with `--server-log` (the server run with
  `--log-file FILE -lv 4`) its own "restored context checkpoint" lines are counted too (b11434 logs them at trace
  level only, tools/server/server-context.cpp).
- `restore`: the shared prefix's tokens (computed from the template), the saved file's tokens and bytes, then a next
  task's first request on an erased slot (and, embedded, after a restart of the server): tokens restored, restore
  time, tokens cached.
- `dspark`: `/metrics` over the task: drafts, drafted and accepted tokens, accepted tokens per verification pass,
  acceptance per draft position (the embedded server runs no drafter: played replies generate one token each).
- `compaction`: the first one (turn, stage, reason, tokens before and after) and the next request's cached tokens;
  `compactions` counts them. Embedded, a turn adds about 260 tokens, so a 30-turn task passes 85% of the 8,192-token
  window after 13 turns.
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

from agent.conversation.compactor import Compactor  # noqa: E402
from agent.loop import AgentLoop  # noqa: E402
from agent.packing import PackOptions, pack_repository  # noqa: E402
from agent.prompt import task_prompt  # noqa: E402
from agent.protocol.config import LLMConfig, RunConfig  # noqa: E402
from agent.protocol.effort import Effort  # noqa: E402
from agent.protocol.events import Compaction, Event, PrefixCacheEvent, Response, TaskEnd, parse_event  # noqa: E402
from agent.protocol.stats import SpecCounters  # noqa: E402
from agent.record.journal import RunJournal  # noqa: E402
from agent.run.stages.compactor import server_window  # noqa: E402
from agent.server import doctor_target  # noqa: E402
from agent.server.api import LlamaServerAPI  # noqa: E402
from agent.server.binary import find_binary, find_chat_template  # noqa: E402
from agent.server.chat import OpenAIChatModel  # noqa: E402
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
from support.played_server import Exchange, PlayedServer  # noqa: E402
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
NO_COMPACTION = "none: the task never passed the threshold (raise --turns or lower --compact-at)"
# Lines each played `view_file` shows: a turn then adds about 260 tokens (its reasoning, the call as DSML, the
# result), so a 30-turn task passes the embedded server's 8,192-token window after about 16 turns.
VIEW_LINES = 3
# The handoff summary a played server answers a compaction's summary request with (when stubs are not enough).
SUMMARY = Reply("Summarise.", content="I have read the geo modules; nothing is changed yet.")
Reuse = Literal["first", "exact", "checkpoint", "compacted", "none"]


class Turn(BaseModel):
    turn: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    held: int | None  # what the slot held after the previous reply
    reuse: Reuse


class CompactionFigures(BaseModel):
    turn: int
    stage: str
    reason: str
    tokens_before: int
    tokens_after: int
    next_cached: int | None  # the next request's cached tokens


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
    template_status: str  # ok: V4 Flash 0731's kept file
    thinking: str
    thinking_status: str
    effort_preamble: bool  # max effort's preamble is in the rendered prompt
    build: str


class ReuseProbe(BaseModel):
    first_prompt: int
    shared: int
    cached: int
    status: str
    message: str


class Acceptance(BaseModel):
    mode: Literal["server", "embedded"]
    what: str
    server: str
    template: TemplateFigures
    reuse_probe: ReuseProbe
    ended: str  # how the measured task ended: its outcome and reason
    turns: list[Turn]
    checkpoint_hits: int
    checkpoint_log_lines: int | None
    # embedded: requests between compactions that did not extend what the slot held (tests/support)
    divergences: int | None
    restore: RestoreFigures
    dspark: DsparkFigures | str
    compactions: int
    compaction: CompactionFigures | str


# --- the steps, on any server ------------------------------------------------------------------------------------


def measure_template(api: LlamaServerAPI) -> TemplateFigures:
    """doctor's template and thinking checks: /props, the probe's rendering and a live reply's reasoning."""
    props = api.props()
    template = doctor_target.check_template(props, doctor_target.kept_template())
    prompt = doctor_target.rendering(api, EFFORT)
    probe = api.chat_completion({**doctor_target.probe_body(doctor_target.PROBE_MESSAGES, EFFORT), "max_tokens": 32})
    reasoning = (probe.get("choices") or [{}])[0].get("message", {}).get("reasoning_content")
    thinking = doctor_target.check_thinking(prompt, reasoning, EFFORT)
    return TemplateFigures(
        template=template.message,
        template_status=template.status,
        thinking=thinking.message,
        thinking_status=thinking.status,
        effort_preamble=prompt is not None and doctor_target.FLASH_MAX_PREAMBLE in prompt,
        build=str(props.get("build_info", "unknown")),
    )


def measure_reuse(api: LlamaServerAPI) -> ReuseProbe:
    probe = doctor_target.extension_probe(api, EFFORT)
    check = doctor_target.check_prompt_cache(probe)
    return ReuseProbe(**probe.model_dump(), status=check.status, message=check.message)


def read_events(transcript: Path) -> list[Any]:
    return [parse_event(line) for line in transcript.read_bytes().splitlines() if line.strip()]


def classify(cached: int, held: int | None, compacted: bool) -> Reuse:
    if held is None:
        return "first"
    if compacted:
        return "compacted"
    if cached == 0:
        return "none"
    # The slot keeps all a reply generated but the last token sampled; a tokenizer may join one more across the
    # turn's end (SmolLM2's BPE: the last character with the `<` of the end-of-sentence marker).
    return "exact" if cached >= held - 1 else "checkpoint"


def turns_of(events: list[Any]) -> tuple[list[Turn], list[Compaction]]:
    """Per request of one task, what it reused of what the slot held after the previous reply; its compactions."""
    turns: list[Turn] = []
    compactions: list[Compaction] = []
    compacted = False
    for event in events:
        if isinstance(event, Compaction):
            compactions.append(event)
            compacted = True
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
                reuse=classify(stats.cached_tokens, held, compacted),
            )
        )
        compacted = False
    return turns, compactions


def compaction_of(turns: list[Turn], compactions: list[Compaction]) -> CompactionFigures | str:
    if not compactions:
        return NO_COMPACTION
    first = compactions[0]
    after = next((turn for turn in turns if turn.reuse == "compacted"), None)
    return CompactionFigures(
        turn=first.turn,
        stage=first.stage,
        reason=first.reason,
        tokens_before=first.tokens_before,
        tokens_after=first.tokens_after,
        next_cached=after.cached_tokens if after else None,
    )


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


def between_compactions(exchanges: list[Exchange]) -> list[list[Exchange]]:
    """The requests in runs that each extend the history before them: a compaction rewrites the history, and the
    request after it starts a new run (it extends the system message and the task, not what the slot held)."""
    runs: list[list[Exchange]] = []
    for exchange in exchanges:
        kept = runs[-1][-1].body["messages"] if runs else None
        if kept is None or exchange.body["messages"][: len(kept)] != kept:
            runs.append([])
        runs[-1].append(exchange)
    return runs


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


def played_task(
    played: PlayedServer, cache: PrefixCache, repo: Path, system: str, journal: RunJournal, compact_at: float
) -> str:
    """One task through the product's loop on the played server, compacting as a run's loop stage does, its
    events written as a run writes them; how it ended."""
    config = LLMConfig(server_url=played.url, max_retries=0, effort=EFFORT, request_timeout_s=3600)
    model = cache.wrap(OpenAIChatModel(config, slot=cache.slot))
    tools, ledger = default_registry(), Ledger(old_names_in(TASK))
    context = ToolContext(LocalExecutor(repo), None, 30, 20_000, ledger=ledger)
    window = server_window(played.url, tools.schemas(), config, compact_at)
    assert window is not None, "the embedded server says its window (/props)"
    compactor = Compactor(window, lambda: ledger.render(context))  # the summary's facts: the ledger

    def emit(event: Event) -> None:
        journal.record(event.model_copy(update={"task": 0}))

    cache.notify = emit
    loop = AgentLoop(model, tools, context, max_turns=len(played.script), emit=emit, compactor=compactor)
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


def embedded(turns: int, compact_at: float) -> Acceptance:
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
                with PlayedServer(state.url, script, summary=SUMMARY) as played:
                    ended = played_task(played, cache.for_slot(0), repo, system, journal, compact_at)
                    return read_events(journal.directory / "transcript.jsonl"), list(played.exchanges), ended

        with embedded_server(work) as state, LlamaServerAPI(state.url, timeout_s=600.0) as api:
            template, reuse = measure_template(api), measure_reuse(api)
            shared = len(Rendering(api, EFFORT).shared_prefix(system, tools))
            before = api.metrics_text()
            events, exchanges, ended = task(state, "task", played_script(repo, turns))
            after = api.metrics_text()
            api.slot_action(0, "erase")  # a cold slot: the next task's first request restores the prefix
            erased, _, _ = task(state, "after-erase", played_script(repo, 1))
        with embedded_server(work) as restarted:  # another server process on the same files: nothing resident
            after_restart, _, _ = task(restarted, "after-restart", played_script(repo, 1))
        saved = saved_tokens(events)
        turn_rows, compactions = turns_of(events)
        return Acceptance(
            mode="embedded",
            what=EMBEDDED,
            server=state.url,
            template=template,
            reuse_probe=reuse,
            ended=ended,
            turns=turn_rows,
            checkpoint_hits=sum(row.reuse == "checkpoint" for row in turn_rows),
            checkpoint_log_lines=None,
            divergences=sum(len(divergences(run)) for run in between_compactions(exchanges)),
            restore=RestoreFigures(
                shared_prefix_tokens=shared,
                saved_tokens=saved,
                file_bytes=file_bytes(work / "slots", saved),
                first_requests=[first_request(erased, "an erase"), first_request(after_restart, "a restart")],
            ),
            dspark=spec_delta(before, after),
            compactions=len(compactions),
            compaction=compaction_of(turn_rows, compactions),
        )


# --- --server: the product's own run on a real server ------------------------------------------------------------


def product_run(url: str, repo: Path, runs: Path, turns: int, compact_at: float) -> list[Any]:
    """`refactor-agent run` of the task (its verdict does not matter here), and its transcript's events."""
    command = [
        sys.executable, "-m", "agent", "run", str(repo), "--task", TASK, "--server", url, "--runs-dir", str(runs),
        "--max-turns", str(turns), "--effort", EFFORT, "--compact-at", str(compact_at),
    ]  # fmt: skip
    subprocess.run(command, cwd=ROOT, check=False)
    (transcript,) = runs.glob("*/transcript.jsonl")  # a runs directory of its own: this run's
    return read_events(transcript)


def ended_of(events: list[Any]) -> str:
    ends = [event.outcome for event in events if isinstance(event, TaskEnd)]
    return f"{ends[0].status}: {ends[0].reason}" if ends else "the run recorded no task end"


def against_server(url: str, turns: int, compact_at: float, log: Path | None) -> Acceptance:
    port = urlsplit(url).port
    state = find_state(port) if port is not None else None
    save_dir = state.slot_save_path if state is not None else None
    with tempfile.TemporaryDirectory(prefix="v4-acceptance-") as scratch, LlamaServerAPI(url, timeout_s=3600.0) as api:
        work = Path(scratch)
        repo = fixture_repository(work)
        template, reuse = measure_template(api), measure_reuse(api)
        before = api.metrics_text()
        events = product_run(url, repo, work / "runs-task", turns, compact_at)
        after = api.metrics_text()
        api.slot_action(0, "erase")
        erased = product_run(url, repo, work / "runs-after-erase", 1, compact_at)
        saved = saved_tokens(events)
        turn_rows, compactions = turns_of(events)
        return Acceptance(
            mode="server",
            what=f"the product's run of {REPOSITORY}'s task on {url}",
            server=url,
            template=template,
            reuse_probe=reuse,
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
            compactions=len(compactions),
            compaction=compaction_of(turn_rows, compactions),
        )


# --- the report --------------------------------------------------------------------------------------------------


def _count(value: int | float | None) -> str:
    return "–" if value is None else f"{value:,}"


def markdown(result: Acceptance) -> str:
    template, restore = result.template, result.restore
    lines = [
        result.what,
        f"template: {template.template} ({template.template_status})",
        f"thinking: {template.thinking} ({template.thinking_status}); build {template.build}",
        f"reuse probe: {result.reuse_probe.message} ({result.reuse_probe.status})",
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
        lines.append(f"requests between compactions that did not extend what the slot held: {result.divergences}")
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
    compaction = result.compaction
    if isinstance(compaction, CompactionFigures):
        compaction = (
            f"{result.compactions} in the task; the first before turn {compaction.turn}, {compaction.stage} "
            f"({compaction.reason}): {compaction.tokens_before:,} → {compaction.tokens_after:,} tokens, the next "
            f"request cached {_count(compaction.next_cached)}"
        )
    dspark = result.dspark
    lines += [
        "",
        f"dspark: {dspark}"
        if isinstance(dspark, str)
        else f"dspark: {dspark.drafts:,} drafts, {dspark.accepted_tokens:,} of {dspark.draft_tokens:,} drafted "
        f"tokens accepted ({dspark.acceptance_rate}), {dspark.accepted_per_pass} per pass, by position "
        f"{dspark.acceptance_per_position}",
        f"compaction: {compaction}",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", help="a DeepSeek V4 server's URL: the product runs a task there")
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--compact-at", type=float, default=RunConfig.model_fields["compact_at"].default)
    parser.add_argument("--json", type=Path, default=OUT / "v4_acceptance.json")
    parser.add_argument("--server-log", type=Path, help="the server's --log-file (with -lv 4): checkpoint lines")
    arguments = parser.parse_args()
    if arguments.turns < 1:
        parser.error("--turns must be at least 1")
    if arguments.server_log is not None and arguments.server is None:
        parser.error("--server-log goes with --server")
    if not 0 < arguments.compact_at <= 1:
        parser.error("--compact-at is a share of the window: above 0, at most 1")
    if arguments.server is None:
        result = embedded(arguments.turns, arguments.compact_at)
    else:
        result = against_server(arguments.server, arguments.turns, arguments.compact_at, arguments.server_log)
    arguments.json.parent.mkdir(parents=True, exist_ok=True)
    arguments.json.write_text(result.model_dump_json(indent=2))
    print(markdown(result))


if __name__ == "__main__":
    main()
