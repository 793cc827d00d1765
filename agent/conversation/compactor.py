"""Compaction instead of failure: what the loop asks before each request and after the server said the request does
not fit.

First the deterministic stage (agent/conversation/compaction.py: older results stubbed, older reasoning dropped);
when that leaves the conversation over the target, the model is asked for a handoff summary, appended to the live
history so the server serves the request from the slot it already holds (to the trimmed history when the live one
leaves no room for the reply), and the conversation becomes the system
message, the task, the summary with the agent's own record (the ledger and `git diff --stat`, from the `facts` the
stage gives), and the latest turns that fit. Either way a `Compaction` event says what went. A conversation whose
system message and task alone pass the threshold cannot be compacted: the task fails with that reason, before
minutes of prefill.

The summary request sends the same tools and settings as every other request (through the loop's `ask`): the
rendering of the history does not depend on `tool_choice`, so the cached prefix holds; the handoff prompt asks for
no tool call, and any the model makes anyway are not run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from agent.conversation.compaction import (
    KEPT_TURNS,
    handoff_request,
    summarised,
    summary_message,
    trim,
    turns,
)
from agent.conversation.window import ContextWindow, estimated_tokens
from agent.protocol.events import Compaction
from agent.protocol.model import AssistantTurn, ContextOverflow, MalformedOutput
from agent.protocol.stats import RequestStats

Ask = Callable[[list[dict[str, Any]]], AssistantTurn]  # one request with the loop's model and tools
Reason = Literal["threshold", "overflow", "window"]


@dataclass(frozen=True)
class Compacted:
    messages: list[dict[str, Any]]
    event: Compaction


class Compactor:
    _SUMMARISED = "the system message, the task and the handoff summary"

    def __init__(self, window: ContextWindow, facts: Callable[[], str], *, kept_turns: int = KEPT_TURNS) -> None:
        """facts: the agent's record of the task for the summary (the ledger, `git diff --stat`)."""
        self.window = window
        self.facts = facts
        self.kept_turns = kept_turns

    def replied(self, messages: list[dict[str, Any]], stats: RequestStats) -> None:
        self.window.observe(messages, stats)

    def ran_into_window(self, stats: RequestStats) -> bool:
        return self.window.ran_into(stats)

    def before_request(self, messages: list[dict[str, Any]], turn: int, ask: Ask) -> Compacted | None:
        """None while the request fits under the threshold; else the compacted conversation."""
        size = self.window.size(messages)
        if size < self.window.threshold:
            return None
        return self.compact(messages, turn, "threshold", size, ask)

    def overflowed(self, messages: list[dict[str, Any]], turn: int, overflow: ContextOverflow, ask: Ask) -> Compacted:
        before = overflow.prompt_tokens or self.window.size(messages)
        return self.compact(messages, turn, "overflow", before, ask)

    def compact(self, messages: list[dict[str, Any]], turn: int, reason: Reason, before: int, ask: Ask) -> Compacted:
        if not turns(messages):  # nothing left to take out: the task, or an earlier compaction's summary
            what = "the system message and the task" if len(messages) <= 2 else self._SUMMARISED
            raise ContextOverflow(self._does_not_fit(what, before))
        trimmed = trim(messages, self.kept_turns)
        figures = {
            "results_stubbed": trimmed.results_stubbed,
            "reasoning_dropped": trimmed.reasoning_dropped,
            "arguments_shortened": trimmed.arguments_shortened,
            "chars_elided": trimmed.chars_elided,
        }
        if trimmed.changed:
            after = self.window.exact(trimmed.messages)
            if after <= self.window.target:
                return self._compacted(trimmed.messages, turn, "stubs", reason, before, after, figures)
        summary, stats = self._summary(self._summary_base(messages, trimmed.messages, reason), ask)
        history, kept = self._fit(trimmed.messages, summary)
        after = self.window.exact(history)
        if after >= self.window.threshold:
            raise ContextOverflow(self._does_not_fit(self._SUMMARISED, after))
        figures["turns_dropped"] = len(turns(messages)) - kept
        return self._compacted(history, turn, "summary", reason, before, after, figures, stats)

    def _summary_base(
        self, live: list[dict[str, Any]], trimmed: list[dict[str, Any]], reason: Reason
    ) -> list[dict[str, Any]] | None:
        """What the summary request extends: the live history, which the slot holds, when the request leaves room
        for the reply; else the trimmed history (after an overflow the live one does not fit at all), then the
        history with every turn trimmed; None when none does."""
        room = (self.window.n_ctx - self.window.threshold) // 2
        candidates = [trimmed, trim(live, 0).messages]
        for base in candidates if reason == "overflow" else [live, *candidates]:
            if self.window.exact(handoff_request(base)) <= self.window.n_ctx - room:
                return base
        return None

    def _summary(self, base: list[dict[str, Any]] | None, ask: Ask) -> tuple[dict[str, Any], RequestStats | None]:
        """The summary message: the model's handoff summary (nothing when it cannot write one) and the facts."""
        if base is None:
            return summary_message("", self.facts()), None
        try:
            reply = ask(handoff_request(base))
        except (ContextOverflow, MalformedOutput):
            return summary_message("", self.facts()), None
        return summary_message(reply.content, self.facts()), reply.stats

    def _fit(self, trimmed: list[dict[str, Any]], summary: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
        """The summarised history with as many of the latest turns as keep it under the target, and how many."""
        groups = turns(trimmed)
        room = self.window.target - self.window.exact(summarised(trimmed, summary, 0))
        kept = 0
        for group in reversed(groups):
            room -= estimated_tokens(group)
            if room < 0:
                break
            kept += 1
        while kept and self.window.exact(summarised(trimmed, summary, kept)) > self.window.target:
            kept -= 1  # the estimate was short: one turn fewer
        return summarised(trimmed, summary, kept), kept

    def _compacted(
        self,
        messages: list[dict[str, Any]],
        turn: int,
        stage: Literal["stubs", "summary"],
        reason: Reason,
        before: int,
        after: int,
        figures: dict[str, int],
        stats: RequestStats | None = None,
    ) -> Compacted:
        event = Compaction(
            turn=turn,
            stage=stage,
            reason=reason,
            tokens_before=before,
            tokens_after=after,
            threshold=self.window.threshold,
            n_ctx=self.window.n_ctx,
            summary_stats=stats,
            messages=messages[1:],
            **figures,
        )
        return Compacted(messages, event)

    def _does_not_fit(self, what: str, tokens: int) -> str:
        window = self.window
        return (
            f"{what} take {tokens:,} of the {window.n_ctx:,}-token window, past the {window.threshold:,} at which "
            f"it is compacted (--compact-at {window.compact_at:g}): start the server with a larger --ctx"
        )
