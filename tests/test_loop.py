"""The loop against the scripted server: what it sends, and how each kind of ending is reached."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from agent.conversation.compactor import Compactor
from agent.conversation.window import ContextWindow
from agent.loop import AgentLoop, LoopResult
from agent.protocol.config import LLMConfig
from agent.server.chat import OpenAIChatModel
from tools.base import ToolContext
from tools.registry import default_registry

from support.local_sandbox import LocalExecutor
from support.repos import SAMPLE_FILES, make_repo
from support.scripted_model import ScriptedModel
from support.scripted_server import Fail, Reply, ScriptedServer, rendered_prompt, tokens_of


def run_loop(
    tmp_path: Path, script: list, *, max_turns: int = 10, n_ctx: int = 65536
) -> tuple[LoopResult, list[dict], ScriptedServer]:
    repo = make_repo(tmp_path / "repo")
    context = ToolContext(LocalExecutor(repo), "python3 -m pytest -q", 30, 4_000)
    events: list[dict] = []
    with ScriptedServer(script, n_ctx=n_ctx) as server:
        model = OpenAIChatModel(LLMConfig(server_url=server.url, retry_backoff_s=0.0, max_retries=1))
        loop = AgentLoop(model, default_registry(), context, max_turns=max_turns, emit=events.append)
        result = loop.run("SYSTEM " * 200, "Rename compute_area to area")
    return result, events, server


def test_history_is_append_only_and_the_prefix_never_changes(tmp_path: Path) -> None:
    script = [
        Reply(tool_calls=[("view_file", {"path": "pkg/geometry.py"})], reasoning="look first"),
        Reply(tool_calls=[("str_replace", {"path": "pkg/geometry.py", "old": "def compute_area", "new": "def area"})]),
        Reply(tool_calls=[("finish", {"summary": "Rename compute_area"})]),
    ]
    result, _events, server = run_loop(tmp_path, script)
    requests = server.requests
    assert result.outcome == "finished" and result.summary == "Rename compute_area"
    assert len(requests) == 3
    for earlier, later in itertools.pairwise(requests):
        assert later["messages"][: len(earlier["messages"])] == earlier["messages"]
        assert later["tools"] == earlier["tools"]
    assert requests[1]["messages"][2]["reasoning_content"] == "look first"
    later_turns = [r.cached_tokens / r.prompt_tokens for r in result.requests[1:]]
    assert min(later_turns) > 0.9


def test_malformed_calls_are_survived(tmp_path: Path) -> None:
    script = [
        Reply(tool_calls=[("bash", '{"command": "ls" ')]),
        Reply(tool_calls=[("teleport", {"to": "prod"})]),
        Reply(tool_calls=[("view_file", {"path": "../../etc/passwd"})]),
        Reply(tool_calls=[("finish", {"summary": "gave up"})]),
    ]
    result, events, _ = run_loop(tmp_path, script)
    errors = [e.text for e in events if e.type == "tool_result" and e.is_error]
    assert result.outcome == "finished"
    assert len(errors) == 3
    assert "not valid JSON" in errors[0] and "unknown tool" in errors[1] and "'..' is not allowed" in errors[2]


def test_turn_limit_ends_the_loop(tmp_path: Path) -> None:
    script = [Reply(tool_calls=[("bash", {"command": "true"})])] * 5
    result, _, _ = run_loop(tmp_path, script, max_turns=3)
    assert (result.outcome, result.turns) == ("max_turns", 3)


def test_an_answer_without_tool_calls_stops(tmp_path: Path) -> None:
    result, _, _ = run_loop(tmp_path, [Reply(content="I cannot help with that.")])
    assert result.outcome == "stopped" and result.summary == "I cannot help with that."


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (
            Reply(content="I will now rename", finish_reason="length"),
            "the reply was cut at max_tokens without a tool call",
        ),
        (Reply(reasoning="Let me think about", finish_reason="length"), "cut at max_tokens inside its reasoning"),
        (Reply(reasoning="Let me think about it."), "the model's reasoning never closed"),
        (Reply(), "the model returned an empty reply"),
    ],
    ids=["cut", "cut in reasoning", "reasoning never closed", "empty"],
)
def test_a_reply_without_a_call_ends_the_turn_saying_why(tmp_path: Path, reply: Reply, reason: str) -> None:
    """Not resampled: a model that is capped or cannot close its reasoning would do the same again."""
    result, _, server = run_loop(tmp_path, [reply])
    assert result.outcome == "stopped" and reason in result.reason
    assert len(server.requests) == 1


def test_the_calls_of_a_reply_cut_at_max_tokens_are_not_run(tmp_path: Path) -> None:
    """A cut reply's last call is incomplete whatever its arguments parse to: none of its calls runs, each is
    answered, and the model goes on."""
    cut = Reply(
        tool_calls=[("create_file", {"path": "new.py", "content": "def f(x):\n"}), ("bash", {"command": "touch b"})],
        finish_reason="length",
    )
    result, events, server = run_loop(tmp_path, [cut, Reply(tool_calls=[("finish", {"summary": "done"})])])
    assert result.outcome == "finished"
    repo = tmp_path / "repo"
    assert not (repo / "new.py").exists() and not (repo / "b").exists()
    answers = [message for message in server.requests[1]["messages"] if message["role"] == "tool"]
    assert len(answers) == 2 and all("cut at max_tokens" in answer["content"] for answer in answers)
    assert [event.name for event in events if event.type == "tool_result"] == ["create_file", "bash", "finish"]


@pytest.mark.parametrize(
    ("script", "n_ctx", "reason"),
    [
        ([Fail(500, {"error": {"message": "boom", "type": "server_error"}})] * 3, 65536, "failed 2 times"),
        ([], 100, "exceed_context_size_error"),
    ],
)
def test_model_failures_end_with_a_reason(tmp_path: Path, script: list, n_ctx: int, reason: str) -> None:
    result, _, _ = run_loop(tmp_path, script, n_ctx=n_ctx)
    assert result.outcome == "error" and reason in result.reason


def test_resume_appends_one_user_message_after_an_end_and_keeps_the_prefix(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    model = ScriptedModel(
        [
            Reply(tool_calls=[("finish", {"summary": "first try"})]),
            Reply(tool_calls=[("view_file", {"path": "pkg/geometry.py"})]),
            Reply(tool_calls=[("finish", {"summary": "second try"})]),
        ]
    )
    context = ToolContext(LocalExecutor(repo), None, 30, 4_000)
    loop = AgentLoop(model, default_registry(), context, max_turns=3, emit=lambda event: None)
    first = loop.run("SYSTEM", "the task")
    assert (first.outcome, first.summary, first.turns) == ("finished", "first try", 1)
    second = loop.resume("the gate found a regression")
    assert (second.outcome, second.summary, second.turns) == ("finished", "second try", 3)
    after_resume = model.requests[1]
    assert after_resume[: len(model.requests[0])] == model.requests[0], "append-only: the cached prefix holds"
    assert after_resume[-1] == {"role": "user", "content": "the gate found a regression"}
    assert loop.resume("once more").outcome == "max_turns", "resumed turns count against the same limit"


def test_the_token_budget_ends_the_task(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    model = ScriptedModel([Reply(tool_calls=[("view_file", {"path": "pkg/geometry.py"})])] * 3)
    context = ToolContext(LocalExecutor(repo), None, 30, 4_000)
    loop = AgentLoop(model, default_registry(), context, max_turns=10, emit=lambda event: None, max_tokens=1)
    result = loop.run("SYSTEM", "the task")
    assert (result.outcome, result.reason, result.turns) == (
        "max_turns",
        "spent --max-tokens-per-task 1 without finish",
        1,
    )


def test_a_notice_is_appended_before_the_next_request_once(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    view = Reply(tool_calls=[("view_file", {"path": "pkg/geometry.py"})])
    model = ScriptedModel([view, view, view, Reply(tool_calls=[("finish", {"summary": "done"})])])
    context = ToolContext(LocalExecutor(repo), None, 30, 4_000)
    notices = iter([None, "time is up", None, None])
    loop = AgentLoop(
        model, default_registry(), context, max_turns=10, emit=lambda event: None, notice=lambda: next(notices)
    )
    assert loop.run("SYSTEM", "the task").outcome == "finished"
    assert model.requests[1][-1] == {"role": "user", "content": "time is up"}  # appended: the prefix holds
    assert sum(message.get("content") == "time is up" for message in model.requests[-1]) == 1


def test_continue_from_sends_the_rebuilt_conversation_then_one_message(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    model = ScriptedModel([Reply(tool_calls=[("finish", {"summary": "done"})])])
    events: list = []
    context = ToolContext(LocalExecutor(repo), None, 30, 4_000)
    loop = AgentLoop(model, default_registry(), context, max_turns=10, emit=events.append)
    earlier = [{"role": "system", "content": "S"}, {"role": "user", "content": "T"}]
    result = loop.continue_from(earlier, turn=4, recorded=2, message="restarted")
    assert (result.outcome, result.turns) == ("finished", 5)
    assert model.requests[0] == [*earlier, {"role": "user", "content": "restarted"}]
    (request,) = [event for event in events if event.type == "request"]
    assert request.new_messages == [{"role": "user", "content": "restarted"}] and request.tools is None


def test_rejected_tool_calls_are_counted_by_tool_with_the_last_error(tmp_path: Path) -> None:
    """A failed task says why: how many calls of each tool came back as errors, and the last error's first line."""
    missing = {"path": "pkg/geometry.py", "old": "no such text", "new": "x"}
    script = [
        Reply(tool_calls=[("str_replace", missing)]),
        Reply(tool_calls=[("view_file", {"path": "../outside.py"})]),
        Reply(tool_calls=[("view_file", {"path": "pkg/geometry.py"})]),
        Reply(tool_calls=[("str_replace", missing)]),
    ]
    result, events, _ = run_loop(tmp_path, script, max_turns=4)
    assert result.outcome == "max_turns"
    assert result.rejected == {"str_replace": 2, "view_file": 1}
    last = next(e.text for e in reversed(events) if e.type == "tool_result" and e.is_error)
    assert result.last_error == last.splitlines()[0].removeprefix("error: ") and "\n" not in result.last_error


def test_a_capped_reply_without_a_tool_call_stops_with_its_token_count(tmp_path: Path) -> None:
    result, _, _ = run_loop(tmp_path, [Reply(content="I will now rename " * 8, finish_reason="length")])
    assert result.outcome == "stopped" and result.capped == result.requests[-1].completion_tokens > 0
    answered, _, _ = run_loop(tmp_path / "answered", [Reply(content="Nothing to do.")])
    assert answered.capped is None


def test_a_server_that_stops_answering_is_lost_not_an_answer(tmp_path: Path) -> None:
    fail = Fail(500, {"error": {"message": "boom", "type": "server_error"}})
    result, _, _ = run_loop(tmp_path, [fail] * 3)
    assert result.outcome == "error" and result.lost == "server"
    overflow, _, _ = run_loop(tmp_path / "overflow", [], n_ctx=100)  # the server answered: the prompt is too long
    assert overflow.outcome == "error" and overflow.lost is None


def _compactor(n_ctx: int, tools: list[dict]) -> Compactor:
    """A compactor whose count is the scripted model's and server's own: 4 characters a token of the rendering."""
    count = lambda messages: tokens_of(rendered_prompt({"messages": messages, "tools": tools}))  # noqa: E731
    return Compactor(ContextWindow(n_ctx, 0.85, count), lambda: "[ledger] files changed so far: 0")


def _big_repo(tmp_path: Path) -> Path:
    big = "".join(f"value_{n} = {n}\n" for n in range(400))
    return make_repo(tmp_path / "repo", {**SAMPLE_FILES, "pkg/big.py": big})


def _views(count: int) -> list[Reply]:
    return [Reply(tool_calls=[("view_file", {"path": "pkg/big.py"})], reasoning="Let me look. " * 40)] * count


def test_over_the_threshold_the_loop_compacts_before_the_request(tmp_path: Path) -> None:
    model = ScriptedModel([*_views(8), Reply(tool_calls=[("finish", {"summary": "done"})])])
    events: list = []
    registry = default_registry()
    compactor = _compactor(10_000, registry.schemas())
    context = ToolContext(LocalExecutor(_big_repo(tmp_path)), None, 30, 4_000)
    loop = AgentLoop(model, registry, context, max_turns=12, emit=events.append, compactor=compactor)
    result = loop.run("SYSTEM " * 200, "Rename compute_area to area")
    assert result.outcome == "finished"
    compactions = [event for event in events if event.type == "compaction"]
    assert compactions and all(event.stage == "stubs" for event in compactions)
    threshold = compactor.window.threshold
    assert all(event.tokens_before >= threshold > event.tokens_after for event in compactions)
    assert [record.tokens_after for record in result.compactions] == [event.tokens_after for event in compactions]
    # The compaction comes before the request it is for, and that request records nothing old again.
    first = events.index(compactions[0])
    assert events[first + 1].type == "request" and events[first + 1].new_messages == []
    assert all(request[0] == model.requests[0][0] for request in model.requests), "the system message never changes"
    assert all(stats.prompt_tokens < threshold for stats in result.requests)


def test_a_task_whose_system_and_task_do_not_fit_fails_before_the_first_request(tmp_path: Path) -> None:
    model = ScriptedModel(_views(1))
    registry = default_registry()
    context = ToolContext(LocalExecutor(make_repo(tmp_path / "repo")), None, 30, 4_000)
    loop = AgentLoop(
        model, registry, context, max_turns=10, emit=lambda event: None, compactor=_compactor(1_000, registry.schemas())
    )
    result = loop.run("SYSTEM " * 2_000, "Rename compute_area to area")
    assert result.outcome == "error" and model.requests == []
    expected = r"the system message and the task take [\d,]+ of the 1,000-token window, past the 850 "
    assert re.match(expected, result.reason)


def test_exceed_context_size_compacts_and_retries(tmp_path: Path) -> None:
    """The server's own answer (HTTP 400 exceed_context_size_error) on the wire: compacted, sent once more."""
    overflow = {
        "error": {
            "code": 400,
            "type": "exceed_context_size_error",
            "message": "request (9000 tokens) exceeds the available context size (8000 tokens), try increasing it",
            "n_prompt_tokens": 9000,
            "n_ctx": 8000,
        }
    }
    script = [*_views(4), Fail(400, overflow), Reply(tool_calls=[("finish", {"summary": "done"})])]
    events: list = []
    registry = default_registry()
    context = ToolContext(LocalExecutor(_big_repo(tmp_path)), None, 30, 4_000)
    with ScriptedServer(script) as server:
        model = OpenAIChatModel(LLMConfig(server_url=server.url, retry_backoff_s=0.0, max_retries=1))
        loop = AgentLoop(
            model, registry, context, max_turns=10, emit=events.append, compactor=_compactor(65_536, registry.schemas())
        )
        result = loop.run("SYSTEM " * 200, "Rename compute_area to area")
        sent = server.requests
    assert result.outcome == "finished"
    (compaction,) = [event for event in events if event.type == "compaction"]
    assert (compaction.reason, compaction.tokens_before, compaction.turn) == ("overflow", 9000, 5)
    assert len(sent) == 6 and sent[5]["messages"] == [sent[4]["messages"][0], *compaction.messages]
    assert len(sent[5]["messages"]) == len(sent[4]["messages"]), "stubs: every call keeps its result"


def test_a_reply_that_filled_the_window_is_dropped_and_the_request_compacted(tmp_path: Path) -> None:
    registry = default_registry()
    compactor = _compactor(12_000, registry.schemas())
    endless = Reply(reasoning="I keep thinking. " * 2_000)  # no tool call, generated until the window was full
    model = ScriptedModel([*_views(4), endless, Reply(tool_calls=[("finish", {"summary": "done"})])])
    events: list = []
    context = ToolContext(LocalExecutor(_big_repo(tmp_path)), None, 30, 4_000)
    loop = AgentLoop(model, registry, context, max_turns=10, emit=events.append, compactor=compactor)
    result = loop.run("SYSTEM " * 200, "Rename compute_area to area")
    assert result.outcome == "finished" and result.summary == "done"
    (compaction,) = [event for event in events if event.type == "compaction"]
    assert compaction.reason == "window" and compaction.turn == 5
    assert all("I keep thinking" not in json.dumps(message) for message in model.requests[-1])
    assert len(result.requests) == 6, "the dropped reply's tokens still count"
