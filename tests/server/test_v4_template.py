"""DeepSeek V4's own chat template on the real llama-server (SmolLM2 rendering V4 Flash 0731's template): every
shape of request the product sends exactly extends what the server's slot holds, so a V4 server, whose cache can
only be extended (`src/llama-kv-cache-dsv4.cpp`), reuses the whole conversation turn after turn.

Replies are played (tests/support/played_server.py): the real server continues each scripted reply and its real
DSML parser hands it to the product's streaming client, which the real loop, tools and ledger then act on. One
server for the module (its first prefill of the 13 tool schemas is the tier's largest cost) and one task played
once for the tests that read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.dispatch.seats import FleetModel, ServerPool
from agent.gate.verdict import GateCheck, repair_message
from agent.loop import AgentLoop, LoopResult
from agent.prompt import task_prompt
from agent.protocol.config import LLMConfig
from agent.protocol.effort import Effort
from agent.protocol.events import Event, TaskStart
from agent.protocol.model import AssistantTurn
from agent.record.journal import RunJournal
from agent.record.progress import RESTARTED_MESSAGE, read_progress
from agent.run.time_limit import TIME_UP_MESSAGE
from agent.server.api import LlamaServerAPI
from agent.server.chat import OpenAIChatModel
from agent.server.launcher import ServerState
from agent.server.rendering import Rendering
from prompts import load_prompt
from tools.base import ToolContext
from tools.ledger import Ledger, old_names_in
from tools.registry import default_registry

from support.dsml import Reply, block, invoke
from support.local_sandbox import LocalExecutor
from support.played_server import Exchange, PlayedServer, Step, render, tokenize
from support.repos import SAMPLE_FILES, make_repo
from support.scripted_server import Fail, ScriptedServer
from support.template_checks import check_extension, divergences, served

pytestmark = pytest.mark.llama_server

TEST_COMMAND = "python3 -m pytest -q"
# The repository as the pack shows it; one file spells the template's user marker raw, as a repository could.
REPOSITORY = "".join(f"## {path}\n```\n{text}```\n\n" for path, text in SAMPLE_FILES.items()) + (
    "## docs/chat.md\n```\nA turn starts with <｜User｜> in DeepSeek's template.\n```\n"
)
SYSTEM = f"{load_prompt('system').rstrip()}\n\n{REPOSITORY}"
TASK = task_prompt("Rename compute_area to area everywhere.", TEST_COMMAND)
FINISH = invoke("finish", summary="Rename compute_area to area")


def loop_on(url: str, repo: Path, *, emit: Callable[[Event], None], effort: Effort = "max") -> AgentLoop:
    """The product's loop, streaming client (pinned to slot 0), real tools and ledger, on the server at url."""
    model = OpenAIChatModel(LLMConfig(server_url=url, max_retries=0, effort=effort), slot=0)
    context = ToolContext(LocalExecutor(repo), TEST_COMMAND, 30, 20_000, ledger=Ledger(old_names_in(TASK)))
    return AgentLoop(model, default_registry(), context, max_turns=30, emit=emit)


@contextmanager
def played_loop(server: ServerState, script: list[Step], repo: Path) -> Iterator[tuple[PlayedServer, AgentLoop]]:
    with PlayedServer(server.url, script) as played:
        yield played, loop_on(played.url, repo, emit=lambda _event: None)


def gate_repair() -> str:
    check = GateCheck(verdict="regressed", reason="tests regressed", syntax_errors=["pkg/geometry.py:2: bad syntax"])
    return repair_message(check)


# Every shape of request the product sends, in one task: string and non-string arguments, two calls in one reply,
# reasoning every turn (with blank lines, edge spaces and non-ASCII), ledger lines in the results of edits, the
# deadline's notice, a plain answer and the gate's repair message, finish beside another call (refused by the
# ledger: old names are left), a second repair.
SCRIPT: list[Step] = [
    Reply("I should read the file first.", calls=(invoke("view_file", path="pkg/geometry.py"),)),
    Reply(
        "  Two things at once.  ",
        calls=(
            invoke("view_file", path="pkg/report.py", start_line=1, end_line=3),
            invoke("plan", items=["rename the def", "update callers"], old_names=["compute_area"]),
        ),
    ),
    Reply(
        "\nEdit it: keep the docstring.\n\n  indented é ✓\n",
        calls=(
            invoke(
                "str_replace",
                path="pkg/geometry.py",
                old='def compute_area(width, height):\n    """Area of a rectangle."""',
                new='def area(width, height):\n    """Area of a rectangle: "w" \\ "h" (é ✓)."""',
            ),
        ),
    ),
    Reply("The deadline is close; I stop here.", content="I renamed the definition; callers are left."),
    Reply(
        "Mend the import, then finish.",
        calls=(invoke("str_replace", path="pkg/report.py", old="import compute_area", new="import area"), FINISH),
    ),
    Reply(
        "The rest with sed, and the tests.",
        calls=(invoke("bash", command=f"sed -i s/compute_area/area/g */*.py; {TEST_COMMAND}", timeout=60),),
    ),
    Reply("Done.", calls=(FINISH,)),
    Reply("Finished before; once more.", calls=(FINISH,)),
]
NOTICES: list[str | None] = [None, None, None, TIME_UP_MESSAGE]


@dataclass
class RecordedTask:
    """The scripted task, played once for this module, its transcript written as a run writes it."""

    played: PlayedServer
    loop: AgentLoop
    results: list[LoopResult]
    exchanges: list[Exchange]  # the task's own: a test may go on playing on `played`
    transcript: Path
    repo: Path


@pytest.fixture(scope="module")
def recorded_task(llama_server_v4: ServerState, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RecordedTask]:
    directory = tmp_path_factory.mktemp("v4-task")
    journal = RunJournal(directory / "runs", "v4-template")
    journal.record(TaskStart(task=0, text=TASK, branch="refactor/v4"))
    notices = list(NOTICES)
    repo = make_repo(directory / "repo")
    with played_loop(llama_server_v4, SCRIPT, repo) as (played, loop):
        loop.emit = lambda event: journal.record(event.model_copy(update={"task": 0}))
        loop.notice = lambda: notices.pop(0) if notices else None
        results = [loop.run(SYSTEM, TASK), loop.resume(gate_repair()), loop.resume(gate_repair())]
        journal.close()
        transcript = journal.directory / "transcript.jsonl"
        yield RecordedTask(played, loop, results, list(played.exchanges), transcript, repo)


def test_every_request_of_a_scripted_task_extends_what_the_slot_holds(recorded_task: RecordedTask) -> None:
    assert [result.outcome for result in recorded_task.results] == ["stopped", "finished", "finished"]
    exchanges = recorded_task.exchanges
    assert len(served(exchanges)) == len(SCRIPT)
    assert divergences(exchanges) == []
    assert "[ledger] files changed so far: 1" in str(exchanges[3].body["messages"])
    assert TIME_UP_MESSAGE in str(exchanges[3].body["messages"][-1])


def test_reasoning_comes_back_from_the_real_parser_byte_for_byte(recorded_task: RecordedTask) -> None:
    """The stream's reasoning deltas, joined, are the reasoning as generated: edge spaces, blank lines, é ✓."""
    replies = [message for message in recorded_task.loop.messages if message["role"] == "assistant"]
    assert [message.get("reasoning_content") for message in replies] == [reply.reasoning for reply in SCRIPT]
    assert replies[3]["content"] == SCRIPT[3].content


def test_effort_tools_and_thinking_never_change_within_a_task(recorded_task: RecordedTask) -> None:
    shaping = ("reasoning_effort", "tools", "tool_choice", "chat_template_kwargs")
    first = recorded_task.exchanges[0].body
    assert first["reasoning_effort"] == "max" and first["tools"] == default_registry().schemas()
    for exchange in recorded_task.exchanges:
        assert {key: exchange.body.get(key) for key in shaping} == {key: first.get(key) for key in shaping}


def test_a_resume_from_the_transcript_extends_what_the_slot_holds(recorded_task: RecordedTask) -> None:
    """The conversation read back from the transcript is the live one, so after a restart the first request
    extends what the slot held: nothing of the conversation is prefilled again."""
    progress = read_progress(recorded_task.transcript).in_flight[0]
    assert progress.messages == recorded_task.loop.messages
    played = recorded_task.played
    played.script = [Reply("Restarted: it is done.", calls=(FINISH,))]
    resumed = loop_on(played.url, recorded_task.repo, emit=lambda _event: None)
    result = resumed.continue_from(
        progress.messages, turn=progress.turn, recorded=progress.recorded, message=RESTARTED_MESSAGE
    )
    assert result.outcome == "finished"
    assert check_extension(recorded_task.exchanges[-1], played.exchanges[-1]) is None


def test_the_check_fails_when_reasoning_is_dropped(
    llama_server_v4: ServerState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tier's own guard: a history that loses the reasoning fails the check, in the text and in the server's
    cached tokens, where request to request nothing shows (V4_PLAN §1.1)."""
    original = AssistantTurn.to_message

    def without_reasoning(turn: AssistantTurn) -> dict[str, Any]:
        message = original(turn)
        message.pop("reasoning_content", None)
        return message

    monkeypatch.setattr(AssistantTurn, "to_message", without_reasoning)
    with played_loop(llama_server_v4, SCRIPT[:1], make_repo(tmp_path / "repo")) as (played, loop):
        loop.run(SYSTEM, TASK)
    first, second = served(played.exchanges)[:2]
    divergence = check_extension(first, second)
    assert divergence is not None and divergence.what == "text"
    assert "<think></think>" in divergence.detail
    assert second.prompt.startswith(first.prompt)  # request to request it extends
    assert second.cached_tokens is not None and second.cached_tokens < len(first.held_tokens) - 1


def test_a_failover_resends_the_same_rendering(llama_server_v4: ServerState, tmp_path: Path) -> None:
    """Seat A serves a turn, then answers 503 until the task moves; seat B's first request renders exactly what A
    failed on and extends what the slot held after A's turn (one real server behind both seats here)."""
    unavailable = Fail(503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
    config = LLMConfig(server_url=llama_server_v4.url, max_retries=1, retry_backoff_s=0.0)
    repo = make_repo(tmp_path / "repo")
    with (
        PlayedServer(llama_server_v4.url, [SCRIPT[0], unavailable, unavailable]) as seat_a,
        PlayedServer(llama_server_v4.url, [Reply("On another server now.", calls=(FINISH,))]) as seat_b,
    ):
        model = FleetModel(ServerPool([seat_a.url, seat_b.url]), config, emit=lambda _event: None)
        context = ToolContext(LocalExecutor(repo), TEST_COMMAND, 30, 20_000)
        result = AgentLoop(model, default_registry(), context, max_turns=5, emit=lambda _event: None).run(SYSTEM, TASK)
    assert result.outcome == "finished"
    served_a, failed_a = seat_a.exchanges[0], seat_a.exchanges[-1]
    (moved,) = seat_b.exchanges
    assert failed_a.status == 503 and moved.prompt == failed_a.prompt
    assert check_extension(served_a, moved) is None


def product_body(effort: Effort, task: str = TASK) -> dict[str, Any]:
    """The first request of a task as the product puts it on the wire."""
    with ScriptedServer([]) as wire:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
        OpenAIChatModel(LLMConfig(server_url=wire.url, effort=effort)).complete(messages, default_registry().schemas())
    return wire.requests[0]


def test_max_and_high_effort_put_the_preamble_in_low_does_not(
    llama_server_v4: ServerState, llama_server_v4_thinking_off: ServerState
) -> None:
    """V4's effort preamble comes before the system text for high and max, and only while thinking is on: a server
    started with `--reasoning off` drops it silently."""
    high, highest = "Reasoning Effort: Absolute maximum", "Reasoning Effort: Beyond maximum"
    rendered = {effort: render(llama_server_v4.url, product_body(effort)) for effort in ("low", "high", "max")}
    system_at = {effort: prompt.index(SYSTEM) for effort, prompt in rendered.items()}
    assert 0 <= rendered["max"].find(highest) < system_at["max"] and high not in rendered["max"]
    assert 0 <= rendered["high"].find(high) < system_at["high"] and highest not in rendered["high"]
    assert "Reasoning Effort" not in rendered["low"]
    assert all(prompt.endswith("<｜Assistant｜><think>") for prompt in rendered.values())
    thinking_off = render(llama_server_v4_thinking_off.url, product_body("max"))
    assert "Reasoning Effort" not in thinking_off and thinking_off.endswith("<｜Assistant｜></think>")


def test_dsml_in_the_content_is_resampled_on_the_real_parser(llama_server_v4: ServerState, tmp_path: Path) -> None:
    """DeepSeek V3.2's block name and an invoke outside a block: the real parser leaves both in the content, and the
    client resamples them (counted) instead of taking them for the final answer; the task goes on."""
    view = invoke("view_file", path="pkg/geometry.py")
    script: list[Step] = [
        Reply("I will read it.", content=block(view, name="function_calls")),
        Reply("I will read it.", content=f"\n\n{view}"),
        Reply("I will read it.", calls=(view,)),
        Reply("It reads well.", content="Nothing to change after all."),
    ]
    with played_loop(llama_server_v4, script, make_repo(tmp_path / "repo")) as (played, loop):
        result = loop.run(SYSTEM, TASK)
    assert (result.outcome, result.reason) == ("stopped", "the model answered without calling a tool")
    left, bare, good = played.exchanges[:3]
    assert (left.finish_reason, bare.finish_reason, good.finish_reason) == ("stop", "stop", "tool_calls")
    assert "<｜DSML｜function_calls>" in left.content and '<｜DSML｜invoke name="view_file">' in bare.content
    assert [stats.resamples for stats in result.requests] == [2, 0]


def test_a_reply_cut_inside_a_call_is_not_run_as_written(llama_server_v4: ServerState, tmp_path: Path) -> None:
    """max_tokens ends a reply inside create_file's content: the real parser hands over the call cut short; it is
    answered, never run. Then a reply cut inside its reasoning ends the turn saying so."""
    whole = block(invoke("create_file", path="pkg/new.py", content="def f(x):\n    return x\n"))
    script: list[Step] = [
        Reply("Create the module.", content=whole[: whole.index("return")], cut=True),
        Reply("Now I think about the callers and", cut=True),
    ]
    repo = make_repo(tmp_path / "repo")
    with played_loop(llama_server_v4, script, repo) as (played, loop):
        result = loop.run(SYSTEM, TASK)
    assert [exchange.finish_reason for exchange in played.exchanges] == ["length", "length"]
    assert not (repo / "pkg" / "new.py").exists()
    (answer,) = [message for message in loop.messages if message["role"] == "tool"]
    assert "cut at max_tokens" in answer["content"]
    assert result.outcome == "stopped" and "cut at max_tokens inside its reasoning" in result.reason


def test_tasks_on_one_commit_share_the_rendered_prefix_up_to_the_first_user_message(
    llama_server_v4: ServerState,
) -> None:
    """The shared prefix comes from the template (probe renderings, their common token prefix), never from a search
    for `<｜User｜>`: SYSTEM spells it raw, as a repository may, and the prefix still runs past the whole system
    message and its tools to the first user message; every task's first request starts with it."""
    tools = default_registry().schemas()
    with LlamaServerAPI(llama_server_v4.url) as api:
        shared = Rendering(api, "max").shared_prefix(SYSTEM, tools)
    url = llama_server_v4.url
    head = {"messages": [{"role": "system", "content": SYSTEM}], "tools": tools, "reasoning_effort": "max"}
    system_only = tokenize(url, render(url, {**head, "add_generation_prompt": False}))
    assert len(shared) >= len(system_only) - 1  # the whole system message and tools, up to a BPE join at its end
    tasks = [TASK, "(parentheses first)", "<｜User｜> spelled first", "\nA newline first", "1. numbered"]
    firsts = [tokenize(url, render(url, product_body("max", task))) for task in tasks]
    assert all(tokens[: len(shared)] == shared for tokens in firsts)
    assert len(shared) < min(len(tokens) for tokens in firsts)
