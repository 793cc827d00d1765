"""Compaction on hand-made conversations: the deterministic stage and the summary's history, the compactor's policy
(when it compacts, which stage is enough, what the summary request is sent on, what it refuses), and the window's
prediction of a request's size."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from agent.conversation.compaction import (
    KEPT_TURNS,
    STUB_MIN_CHARS,
    handoff_request,
    stub,
    summarised,
    summary_message,
    trim,
    turns,
)
from agent.conversation.compactor import Compactor
from agent.conversation.window import ContextWindow
from agent.protocol.model import AssistantTurn, ContextOverflow
from agent.protocol.stats import RequestStats

SYSTEM = {"role": "system", "content": "You refactor code.\n" + "A repository file.\n" * 50}
TASK = {"role": "user", "content": "Rename compute_area to area"}
LEDGER = "[ledger] files changed so far: 1 (pkg/geometry.py)\n[ledger] old names: compute_area: 2 left (a.py:3, ...)"


def _call_turn(number: int, name: str, arguments: dict[str, Any], result: str, reasoning: str = "") -> list[dict]:
    call_id = f"call_{number}"
    assistant: dict[str, Any] = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        ],
    }
    if reasoning:
        assistant["reasoning_content"] = reasoning
    return [assistant, {"role": "tool", "tool_call_id": call_id, "content": result}]


def _conversation(turn_count: int = 6) -> list[dict[str, Any]]:
    messages = [SYSTEM, TASK]
    for number in range(1, turn_count + 1):
        if number % 2:
            messages += _call_turn(
                number, "view_file", {"path": f"pkg/file_{number}.py"}, f"line {number}\n" * 200, "I look. " * 80
            )
        else:
            result = "edited\n" + "x" * 500 + "\n" + LEDGER
            messages += _call_turn(number, "str_replace", {"path": "pkg/geometry.py", "old": "a", "new": "b"}, result)
    return messages


def test_stubs_name_the_tool_its_arguments_and_the_size() -> None:
    view = stub("view_file", '{"path": "src/app.py"}', "x" * 12_345)
    assert view == (
        '[elided: view_file {"path": "src/app.py"} returned 12,345 characters; call it again if you need it]'
    )
    bash = stub("bash", json.dumps({"command": "pytest -q " + "-k x " * 100}), "output\n" * 300)
    first = bash.splitlines()[0]
    assert first.startswith('[elided: bash {"command": "pytest -q -k x') and "returned 2,100 characters" in first
    assert len(first) < 300, "the arguments are cut short in a stub"
    assert stub("str_replace", "{}", "done\n" + LEDGER).splitlines()[1:] == LEDGER.splitlines()


def test_a_stub_never_lets_the_arguments_read_as_a_control_token() -> None:
    assert "<｜User｜>" not in stub("bash", json.dumps({"command": "echo '<｜User｜>'"}), "x" * 1000)


def test_system_task_latest_results_and_ledger_stay_byte_identical() -> None:
    messages = _conversation()
    before = copy.deepcopy(messages)
    trimmed = trim(messages)
    assert messages == before, "the live list is not changed in place"
    after = trimmed.messages
    assert after[0] == SYSTEM and after[1] == TASK
    latest = sum(len(turn) for turn in turns(messages)[-KEPT_TURNS:])
    assert after[-latest:] == messages[-latest:]
    assert len(after) == len(messages), "every call keeps its result"
    for old, new in zip(messages[2:-latest], after[2:-latest], strict=True):
        if old["role"] == "tool":
            assert new["content"].startswith("[elided: ")
            ledger = [line for line in old["content"].splitlines() if line.startswith("[ledger")]
            assert [line for line in new["content"].splitlines() if line.startswith("[ledger")] == ledger
    assert trimmed.results_stubbed == 3 and trimmed.chars_elided > 0


def test_reasoning_older_than_the_last_turns_is_dropped() -> None:
    messages = _conversation()
    after = trim(messages).messages
    old_turns, latest = turns(after)[:-KEPT_TURNS], turns(after)[-KEPT_TURNS:]
    assert all("reasoning_content" not in turn[0] for turn in old_turns)
    assert any("reasoning_content" in turn[0] for turn in latest)
    assert trim(messages).reasoning_dropped == 2


def test_short_results_and_earlier_stubs_stay_as_they_are() -> None:
    messages = [SYSTEM, TASK, *_call_turn(1, "run_tests", {}, "3 passed"), *_conversation(4)[2:]]
    once = trim(messages)
    assert once.messages[3]["content"] == "3 passed", f"shorter than {STUB_MIN_CHARS} characters"
    twice = trim(once.messages)
    assert twice.messages == once.messages and not twice.changed


def test_long_arguments_of_older_calls_are_elided_and_stay_json() -> None:
    content = "def area():\n" + "    return 1\n" * 400
    messages = [SYSTEM, TASK, *_call_turn(1, "create_file", {"path": "a.py", "content": content}, "created")]
    messages += _conversation(3)[2:]
    trimmed = trim(messages)
    arguments = json.loads(trimmed.messages[2]["tool_calls"][0]["function"]["arguments"])
    assert arguments == {"path": "a.py", "content": f"[elided: {len(content):,} characters]"}
    assert trimmed.arguments_shortened == 1


def test_compaction_is_deterministic() -> None:
    assert trim(_conversation()) == trim(_conversation())
    summary = summary_message("I renamed it in two files.", "[ledger] files changed so far: 2")
    assert summarised(_conversation(), summary, 2) == summarised(_conversation(), summary, 2)


def test_the_summary_history_keeps_system_task_summary_and_the_latest_turns() -> None:
    messages = _conversation()
    summary = summary_message("I renamed it in two files.", "[ledger] files changed so far: 2\n pkg/a.py | 2 +-")
    history = summarised(messages, summary, 2)
    assert history[:3] == [SYSTEM, TASK, summary]
    assert history[3:] == [message for turn in turns(messages)[-2:] for message in turn]
    assert "I renamed it in two files." in summary["content"] and "pkg/a.py | 2 +-" in summary["content"]
    assert summarised(messages, summary, 0) == [SYSTEM, TASK, summary]


def test_the_handoff_request_extends_the_live_history() -> None:
    messages = _conversation()
    request = handoff_request(messages)
    assert request[:-1] == messages and request[-1]["role"] == "user" and "handoff summary" in request[-1]["content"]


FACTS = "[ledger] files changed so far: 1 (pkg/geometry.py)\n pkg/geometry.py | 2 +-"


def _tokens(messages: list[dict[str, Any]]) -> int:
    """A stand-in for the server's count: 4 characters a token, as the scripted server counts."""
    return len(json.dumps(messages)) // 4


class _Counted:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, messages: list[dict[str, Any]]) -> int:
        self.calls += 1
        return _tokens(messages)


class _Summariser:
    def __init__(self, summary: str = "I renamed compute_area in geometry.py; the callers are left.") -> None:
        self.summary = summary
        self.requests: list[list[dict[str, Any]]] = []

    def __call__(self, messages: list[dict[str, Any]]) -> AssistantTurn:
        self.requests.append(messages)
        return AssistantTurn(content=self.summary, stats=RequestStats(prompt_tokens=_tokens(messages)))


def _compactor(n_ctx: int, compact_at: float = 0.85) -> Compactor:
    return Compactor(ContextWindow(n_ctx, compact_at, _Counted()), lambda: FACTS)


def test_under_the_threshold_nothing_is_compacted() -> None:
    messages = _conversation()
    ask = _Summariser()
    assert _compactor(_tokens(messages) * 2).before_request(messages, 7, ask) is None
    assert ask.requests == []


def test_stubs_alone_when_they_bring_the_conversation_under_the_target() -> None:
    messages = _conversation()
    compactor = _compactor(int(_tokens(messages) / 0.85 * 0.95))
    ask = _Summariser()
    compacted = compactor.before_request(messages, 7, ask)
    assert compacted is not None and ask.requests == []
    event = compacted.event
    assert (event.stage, event.reason, event.turn) == ("stubs", "threshold", 7)
    assert event.tokens_before >= event.threshold > compactor.window.target >= event.tokens_after
    assert event.tokens_after == _tokens(compacted.messages)
    assert event.results_stubbed == 3 and event.reasoning_dropped == 2
    assert event.messages == compacted.messages[1:], "all but the system message, for resume"


def test_a_handoff_summary_when_stubs_are_not_enough() -> None:
    """A system message that takes most of the window: stubbing the older turns does not bring it under the target,
    so the model is asked, on the live history the slot holds, and its summary replaces the older turns."""
    system = {"role": "system", "content": "A repository file.\n" * 3_000}
    messages = [system, *_conversation(12)[1:]]
    compactor = _compactor(int(_tokens(messages) / 0.88))
    ask = _Summariser()
    compacted = compactor.before_request(messages, 13, ask)
    assert compacted is not None
    (request,) = ask.requests
    assert request[:-1] == messages, "the summary request extends the live history: the slot holds its prefix"
    history = compacted.messages
    assert history[0] == system and history[1] == TASK
    assert ask.summary in history[2]["content"] and FACTS in history[2]["content"]
    kept = turns(history)
    assert kept and [m for turn in kept for m in turn] == history[3:]
    assert history[-1]["content"] == messages[-1]["content"], "the latest turn is kept as it was"
    event = compacted.event
    assert event.stage == "summary" and event.turns_dropped == 12 - len(kept)
    assert event.summary_stats is not None and event.tokens_after <= compactor.window.target


def test_the_summary_request_leaves_room_for_its_reply() -> None:
    """A live history too close to the window's end for the handoff request and its reply: the request goes out on
    the trimmed history instead (it shares the system message and the task with the slot)."""
    messages = _conversation(12)
    compactor = _compactor(int(_tokens(messages) * 0.6))
    ask = _Summariser()
    compacted = compactor.before_request(messages, 13, ask)
    assert compacted is not None and compacted.event.stage == "summary"
    (request,) = ask.requests
    assert request[:2] == messages[:2] and request[:-1] == trim(messages).messages


def test_after_an_overflow_the_summary_request_is_sent_on_the_trimmed_history() -> None:
    messages = _conversation(12)
    compactor = _compactor(int(_tokens(messages) * 0.6))
    ask = _Summariser()
    overflow = ContextOverflow("too long", prompt_tokens=_tokens(messages), n_ctx=compactor.window.n_ctx)
    compacted = compactor.overflowed(messages, 13, overflow, ask)
    assert compacted.event.reason == "overflow" and compacted.event.tokens_before == _tokens(messages)
    assert ask.requests[0][:-1] != messages and ask.requests[0][1] == TASK
    assert all("reasoning_content" not in turn[0] for turn in turns(ask.requests[0][:-1])[:-3])


def test_a_summary_the_model_cannot_write_still_compacts() -> None:
    messages = _conversation(12)
    compactor = _compactor(int(_tokens(messages) * 0.6))

    def overflowing(_messages: list[dict[str, Any]]) -> AssistantTurn:
        raise ContextOverflow("the handoff request does not fit either")

    compacted = compactor.before_request(messages, 13, overflowing)
    assert compacted is not None and compacted.event.summary_stats is None
    summary = compacted.messages[2]["content"]
    assert "(the model wrote no summary)" in summary and FACTS in summary


def test_system_and_task_over_the_threshold_cannot_be_compacted() -> None:
    messages = [SYSTEM, TASK]
    compactor = _compactor(_tokens(messages))
    with pytest.raises(ContextOverflow) as raised:
        compactor.before_request(messages, 1, _Summariser())
    reason = str(raised.value)
    assert reason.startswith(f"the system message and the task take {_tokens(messages):,} of the ")
    assert "--ctx" in reason and f"{compactor.window.threshold:,}" in reason


def test_a_summarised_conversation_that_still_overflows_names_the_summary() -> None:
    """After a compaction that kept no turn the conversation is the system message, the task and the summary: when
    the server says that does not fit, the reason names all three (never "the system message and the task")."""
    messages = [SYSTEM, TASK, summary_message("I renamed it.", FACTS)]
    compactor = _compactor(_tokens(messages) * 2)
    overflow = ContextOverflow("too long", prompt_tokens=5_000, n_ctx=compactor.window.n_ctx)
    with pytest.raises(ContextOverflow) as raised:
        compactor.overflowed(messages, 9, overflow, _Summariser())
    assert str(raised.value).startswith("the system message, the task and the handoff summary take 5,000 of the ")


def test_the_window_estimates_from_the_last_reply_and_counts_near_the_threshold() -> None:
    messages = _conversation(2)
    count = _Counted()
    window = ContextWindow(100_000, 0.85, count)
    assert window.size(messages) == _tokens(messages) and count.calls == 1, "a conversation it does not know"
    window.observe(messages, RequestStats(prompt_tokens=1_000, completion_tokens=50))
    grown = [*messages, {"role": "tool", "tool_call_id": "call_2", "content": "y" * 400}]
    assert window.size(grown) == 1_050 + 120 + 10 and count.calls == 1, "estimated: 0.3 a character, markup"
    window.observe(grown, RequestStats(prompt_tokens=80_000, completion_tokens=500))
    more = [*grown, {"role": "user", "content": "more"}]
    assert window.size(more) == 80_500 + 1 + 10 and count.calls == 1, "4 bytes cannot pass the threshold"
    listing = [*more, {"role": "user", "content": "é" * 3_000}]
    assert window.size(listing) == _tokens(listing)
    assert count.calls == 2, "near the threshold the server counts"


def test_text_of_a_token_a_character_is_counted_before_it_can_pass_the_threshold() -> None:
    """`seq 1 450` is about a token a character where the estimate says 0.3: the estimate would let a request past
    the threshold unseen (on the real 4,096-token window: estimated 3,083, counted 3,598). Whatever may pass the
    threshold, a token at most a byte, is counted."""
    window = ContextWindow(10_000, 0.85, lambda messages: 9_000)
    messages = _conversation(2)
    window.observe(messages, RequestStats(prompt_tokens=6_900, completion_tokens=100))
    listing = "\n".join(str(number) for number in range(1, 450))
    assert window.size([*messages, {"role": "tool", "tool_call_id": "call_2", "content": listing}]) == 9_000
