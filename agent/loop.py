"""The agent loop: ask the model, run its tool calls, append, repeat. Exceptions carry the control flow.

The message list is append-only and the system message and tool list never change within a task, so every
request's rendered prompt starts with the previous one's and llama-server serves it from its KV cache. Only a
compaction (agent/conversation/) replaces the list, when the next request would not fit the server's window; the
system message stays, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agent.protocol.events import Event, Request, Response, ToolCallEvent, ToolResultEvent
from agent.protocol.model import AssistantTurn, ChatModel, ContextOverflow, LLMError, ServerLost, ToolCall
from agent.protocol.records import CompactionRecord
from agent.protocol.stats import RequestStats
from agent.safety.control_text import neutralised_message
from tools.base import FinishRequested, ToolContext
from tools.registry import ToolRegistry

if TYPE_CHECKING:
    from agent.conversation.compactor import Compacted, Compactor

Emit = Callable[[Event], None]
LoopOutcome = Literal["finished", "stopped", "max_turns", "error"]
# The first line of the last rejected call's result, as a failed task's reason quotes it.
LAST_ERROR_CHARS = 200


class LoopEnd(Exception):
    outcome: LoopOutcome = "error"

    def __init__(self, reason: str, summary: str = "", *, capped: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.summary = summary
        self.capped = capped  # a reply cut at its cap with no tool call: its tokens


class Finished(LoopEnd):
    outcome = "finished"


class Stopped(LoopEnd):
    """The model's reply called no tool (an answer, or a reply cut short, empty or all reasoning): the turn ends."""

    outcome = "stopped"


class TurnLimitReached(LoopEnd):
    outcome = "max_turns"


class ModelFailed(LoopEnd):
    outcome = "error"

    def __init__(self, error: LLMError) -> None:
        super().__init__(str(error))
        # The server stopped answering (not a refusal of this request): the task was lost, it did not end.
        self.lost: Literal["server"] | None = "server" if isinstance(error, ServerLost) else None


@dataclass
class LoopResult:
    outcome: LoopOutcome
    reason: str
    summary: str
    turns: int
    requests: list[RequestStats] = field(default_factory=list)
    rejected: dict[str, int] = field(default_factory=dict)  # tool name -> its calls whose result was an error
    last_error: str = ""  # the first line of the last rejected call's result
    lost: Literal["server"] | None = None
    capped: int | None = None  # tokens of a reply cut at its cap with no tool call
    compactions: list[CompactionRecord] = field(default_factory=list)


# A reply cut by max_tokens ends inside its last call, whatever its arguments happen to parse to: none is run.
CUT_CALL_RESULT = (
    "error: your reply was cut at max_tokens before it was complete, so this call was not run; "
    "send it again, shorter if it was long"
)


def _why_no_call(reply: AssistantTurn) -> str:
    """Why a reply without a tool call ends the turn. Never resampled: a model that is capped, or that cannot close
    its reasoning, would do the same again (and a capped small model would loop)."""
    if reply.finish_reason == "length":
        where = "" if reply.content.strip() or not reply.reasoning_content else " inside its reasoning"
        return f"the reply was cut at max_tokens{where} without a tool call"
    if reply.content.strip():
        return "the model answered without calling a tool"
    if reply.reasoning_content:
        return "the model's reasoning never closed: no answer and no tool call after it"
    return "the model returned an empty reply"


class AgentLoop:
    def __init__(
        self,
        model: ChatModel,
        registry: ToolRegistry,
        context: ToolContext,
        *,
        max_turns: int,
        emit: Emit,
        max_tokens: int | None = None,
        notice: Callable[[], str | None] | None = None,
        checkpoint: Callable[[], None] | None = None,
        compactor: Compactor | None = None,
    ) -> None:
        self.model = model
        self.registry = registry
        self.context = context
        self.max_turns = max_turns
        self.max_tokens = max_tokens  # prompt tokens processed plus tokens generated, over the whole task
        self.emit = emit
        # Asked before each request: a user message to append first (the deadline's time-is-up), or None.
        self.notice = notice or (lambda: None)
        # Called after each tool result, before it is emitted: the runner keeps the task's files then (resume).
        self.checkpoint = checkpoint or (lambda: None)
        # None: the window is not known (a scripted model with no server): a request over it fails the task.
        self.compactor = compactor
        self.tool_schemas = registry.schemas()
        self.messages: list[dict[str, Any]] = []
        self.requests: list[RequestStats] = []
        self.compactions: list[CompactionRecord] = []
        self.turn = 0
        self._recorded = 0
        self.rejected: dict[str, int] = {}
        self.last_error = ""

    def run(self, system_prompt: str, task_prompt: str) -> LoopResult:
        self.messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": task_prompt}]
        return self._until_end()

    def resume(self, message: str) -> LoopResult:
        """Go on after an end with one more user message (the gate's repair request): appended, so the cached
        prefix stays valid. Turns keep counting against the same limit. The message quotes test output: its control
        tokens' text is marked (agent/safety/control_text.py)."""
        self.messages.append({"role": "user", "content": neutralised_message(message)})
        return self._until_end()

    def continue_from(self, messages: list[dict[str, Any]], *, turn: int, recorded: int, message: str) -> LoopResult:
        """Go on with a conversation rebuilt from the transcript (resume): the same messages, so the server's
        cached prefix still matches, then one user message. `recorded` messages are in the transcript's requests
        already; the next request records the rest."""
        self.messages = [*messages, {"role": "user", "content": message}]
        self.turn, self._recorded = turn, recorded
        return self._until_end()

    def spent_tokens(self) -> int:
        return sum(stats.prompt_tokens - stats.cached_tokens + stats.completion_tokens for stats in self.requests)

    def _until_end(self) -> LoopResult:
        try:
            while True:
                self.step()
        except LoopEnd as end:
            return LoopResult(
                end.outcome,
                end.reason,
                end.summary,
                self.turn,
                self.requests,
                compactions=self.compactions,
                rejected=dict(self.rejected),
                last_error=self.last_error,
                lost=end.lost if isinstance(end, ModelFailed) else None,
                capped=end.capped,
            )

    def step(self) -> None:
        if self.turn >= self.max_turns:
            raise TurnLimitReached(f"reached --max-turns {self.max_turns} without finish")
        if self.max_tokens is not None and self.spent_tokens() >= self.max_tokens:
            raise TurnLimitReached(f"spent --max-tokens-per-task {self.max_tokens} without finish")
        notice = self.notice()
        if notice is not None:
            self.messages.append({"role": "user", "content": notice})
        self.turn += 1
        reply = self._ask()
        self._answered(reply)
        if not reply.tool_calls:
            capped = reply.stats.completion_tokens if reply.finish_reason == "length" else None
            raise Stopped(_why_no_call(reply), summary=reply.content, capped=capped)
        if reply.finish_reason == "length":
            for call in reply.tool_calls:
                self._answer_unrun(call, CUT_CALL_RESULT)
            return
        for call in reply.tool_calls:
            self._execute(call)

    def _ask(self) -> AssistantTurn:
        """The turn's reply. With a compactor the conversation is compacted first when the request would pass its
        threshold, and compacted and sent once more when the server answers that it does not fit, or when the reply
        filled the window without a tool call (the next request would be larger still)."""
        compactor = self.compactor
        try:
            if compactor is not None:
                self._replace(compactor.before_request(self.messages, self.turn, self._send))
            try:
                reply = self._request()
            except ContextOverflow as overflow:
                if compactor is None:
                    raise
                self._replace(compactor.overflowed(self.messages, self.turn, overflow, self._send))
                return self._request()
            if compactor is not None and not reply.tool_calls and compactor.ran_into_window(reply.stats):
                self._answered(reply)  # in the transcript and the task's figures, not in the conversation
                self.messages.pop()
                filled = reply.stats.prompt_tokens + reply.stats.completion_tokens
                self._replace(compactor.compact(self.messages, self.turn, "window", filled, self._send))
                return self._request()
            return reply
        except LLMError as error:
            raise ModelFailed(error) from error

    def _request(self) -> AssistantTurn:
        self._record_request()
        return self._send(self.messages)

    def _send(self, messages: list[dict[str, Any]]) -> AssistantTurn:
        """One request with the task's tools (the compactor's handoff summary asks through it too)."""
        return self.model.complete(messages, self.tool_schemas)

    def _answered(self, reply: AssistantTurn) -> None:
        self.requests.append(reply.stats)
        self.messages.append(reply.to_message())
        self.emit(Response(turn=self.turn, message=self.messages[-1], stats=reply.stats))
        if self.compactor is not None:
            self.compactor.replied(self.messages, reply.stats)

    def _replace(self, compacted: Compacted | None) -> None:
        """The compacted conversation in place of the live one; its event holds all of it but the system message,
        so the next request records only what comes after."""
        if compacted is None:
            return
        self.messages = compacted.messages
        self._recorded = len(self.messages)
        if compacted.event.summary_stats is not None:
            self.requests.append(compacted.event.summary_stats)
        self.compactions.append(compacted.event.record())
        self.emit(compacted.event)

    def _record_request(self) -> None:
        """Log only what is new since the last request: the repository is in the first one, not in every one."""
        event = Request(
            turn=self.turn,
            message_count=len(self.messages),
            new_messages=self.messages[self._recorded :],
            tools=self.tool_schemas if self._recorded == 0 else None,
        )
        self._recorded = len(self.messages)
        self.emit(event)

    def _execute(self, call: ToolCall) -> None:
        self.emit(ToolCallEvent(turn=self.turn, id=call.id, name=call.name, arguments=call.arguments))
        try:
            result = self.registry.dispatch(call.name, call.arguments, self.context)
        except FinishRequested as finish:
            self._append_tool_result(call, "finished", is_error=False)
            raise Finished("the model called finish", summary=finish.summary) from None
        self._append_tool_result(call, result.text, is_error=result.is_error)

    def _answer_unrun(self, call: ToolCall, text: str) -> None:
        self.emit(ToolCallEvent(turn=self.turn, id=call.id, name=call.name, arguments=call.arguments))
        self._append_tool_result(call, text, is_error=True)

    def _append_tool_result(self, call: ToolCall, text: str, *, is_error: bool) -> None:
        text = neutralised_message(text)  # what the repository and its commands wrote never reads as a turn
        self.messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
        if is_error:
            self.rejected[call.name] = self.rejected.get(call.name, 0) + 1
            first = next((line.strip() for line in text.splitlines() if line.strip()), "")
            self.last_error = first.removeprefix("error: ")[:LAST_ERROR_CHARS]  # the reason line says it was one
        self.checkpoint()
        self.emit(ToolResultEvent(turn=self.turn, id=call.id, name=call.name, is_error=is_error, text=text))
