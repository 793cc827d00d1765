"""The pure transforms of a compaction, functions of the message list alone (no clock, no counter): the same
conversation always compacts to the same messages.

A turn is an assistant message and what follows it up to the next one (its tool results, a notice, a repair
request). The system message (`messages[0]`), the task (`messages[1]`) and the latest turns are never changed.
Older turns keep their shape, so every tool call still has its result, and lose their bulk: a tool result becomes
a one-line stub naming the call and the size elided (its `[ledger]` lines kept: short, and the agent's own
account), long string arguments of a call are elided, and reasoning is dropped (with tools sent, DeepSeek V4's
template renders every earlier turn's reasoning again: at max effort the largest part of a long conversation).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agent.safety.control_text import neutralise
from prompts import load_prompt

KEPT_TURNS = 3
# A result shorter than this stays as it is: its stub would save next to nothing.
STUB_MIN_CHARS = 400
# A string argument longer than this, in an older call, is elided (the content of a create_file).
ARGUMENT_KEPT_CHARS = 1_000
# A stub shows this much of the call's arguments.
STUB_ARGUMENT_CHARS = 200
STUB_START = "[elided: "
LEDGER_LINE_START = "[ledger"
# The model's handoff summary is capped: it replaces turns, it must not become one of their size.
SUMMARY_MAX_CHARS = 12_000


@dataclass(frozen=True)
class Trimmed:
    """The deterministic stage's result and what it removed."""

    messages: list[dict[str, Any]]
    results_stubbed: int = 0
    reasoning_dropped: int = 0
    arguments_shortened: int = 0
    chars_elided: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.results_stubbed or self.reasoning_dropped or self.arguments_shortened)


def turns(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The turns after the task, oldest first; messages before the first assistant message (an earlier
    compaction's summary) belong to none."""
    groups: list[list[dict[str, Any]]] = []
    for message in messages[2:]:
        if message.get("role") == "assistant":
            groups.append([message])
        elif groups:
            groups[-1].append(message)
    return groups


def _latest_start(messages: list[dict[str, Any]], kept_turns: int) -> int:
    """The index from which messages are the latest `kept_turns` turns (2 when there are no more turns than that)."""
    if not kept_turns:
        return len(messages)
    starts = [index for index, message in enumerate(messages) if index >= 2 and message.get("role") == "assistant"]
    return starts[-kept_turns] if len(starts) >= kept_turns else 2


def stub(name: str, arguments: str, text: str) -> str:
    """`[elided: view_file {"path": "src/app.py"} returned 12,345 characters; call it again if you need it]`."""
    shown = arguments if len(arguments) <= STUB_ARGUMENT_CHARS else arguments[:STUB_ARGUMENT_CHARS] + "…"
    line = f"{STUB_START}{name} {shown} returned {len(text):,} characters; call it again if you need it]"
    ledger = [each for each in text.splitlines() if each.startswith(LEDGER_LINE_START)]
    # The arguments are the model's; in a tool result they must not read as a control token either.
    return "\n".join([neutralise(line), *ledger])


def _shortened(value: Any) -> tuple[Any, int]:
    """`value` with every string longer than ARGUMENT_KEPT_CHARS elided, and the characters that took."""
    if isinstance(value, str) and len(value) > ARGUMENT_KEPT_CHARS:
        return f"[elided: {len(value):,} characters]", len(value)
    if isinstance(value, list):
        pairs = [_shortened(item) for item in value]
        return [item for item, _ in pairs], sum(chars for _, chars in pairs)
    if isinstance(value, dict):
        pairs = {key: _shortened(item) for key, item in value.items()}
        return {key: item for key, (item, _) in pairs.items()}, sum(chars for _, chars in pairs.values())
    return value, 0


def _trim_call(call: dict[str, Any]) -> tuple[dict[str, Any], int]:
    arguments = str((call.get("function") or {}).get("arguments") or "")
    try:
        decoded = json.loads(arguments)
    except json.JSONDecodeError:
        return call, 0
    shortened, chars = _shortened(decoded)
    if not chars:
        return call, 0
    function = {**call["function"], "arguments": json.dumps(shortened, ensure_ascii=False)}
    return {**call, "function": function}, chars


def trim(messages: list[dict[str, Any]], kept_turns: int = KEPT_TURNS) -> Trimmed:
    """The deterministic stage: every turn older than the latest `kept_turns` loses its bulk."""
    latest = _latest_start(messages, kept_turns)
    calls: dict[str, tuple[str, str]] = {}  # tool_call_id -> (name, arguments), for the stubs
    trimmed: list[dict[str, Any]] = []
    stubbed = dropped = shortened = elided = 0
    for index, message in enumerate(messages):
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            calls[str(call.get("id"))] = (str(function.get("name")), str(function.get("arguments") or ""))
        if index < 2 or index >= latest:
            trimmed.append(message)
            continue
        if message.get("role") == "assistant":
            message = dict(message)
            reasoning = message.pop("reasoning_content", None)
            if reasoning:
                dropped, elided = dropped + 1, elided + len(reasoning)
            if message.get("tool_calls"):
                pairs = [_trim_call(call) for call in message["tool_calls"]]
                message["tool_calls"] = [call for call, _ in pairs]
                chars = sum(chars for _, chars in pairs)
                shortened, elided = shortened + sum(1 for _, chars in pairs if chars), elided + chars
        elif message.get("role") == "tool":
            text = str(message.get("content") or "")
            if len(text) >= STUB_MIN_CHARS and not text.startswith(STUB_START):
                name, arguments = calls.get(str(message.get("tool_call_id")), ("a tool", "{}"))
                replacement = stub(name, arguments, text)
                message = {**message, "content": replacement}
                stubbed, elided = stubbed + 1, elided + len(text) - len(replacement)
        trimmed.append(message)
    return Trimmed(trimmed, stubbed, dropped, shortened, elided)


def handoff_request(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The live history with the request for a handoff summary appended: its prefix is what the slot holds."""
    return [*messages, {"role": "user", "content": load_prompt("handoff").rstrip()}]


def summary_message(summary: str, facts: str) -> dict[str, Any]:
    """The user message that replaces the older turns: the model's summary and the agent's own record."""
    text = summary.strip() or "(the model wrote no summary)"
    if len(text) > SUMMARY_MAX_CHARS:
        text = text[:SUMMARY_MAX_CHARS] + "…"
    content = load_prompt("compacted").rstrip().format(summary=text, facts=facts.strip() or "(nothing recorded)")
    return {"role": "user", "content": neutralise(content)}


def summarised(messages: list[dict[str, Any]], summary: dict[str, Any], kept_turns: int) -> list[dict[str, Any]]:
    """System message, task, the summary, then the latest `kept_turns` turns of `messages`."""
    kept = turns(messages)[-kept_turns:] if kept_turns else []
    return [messages[0], messages[1], summary, *(message for turn in kept for message in turn)]
