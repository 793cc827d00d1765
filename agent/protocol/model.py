"""The chat model as every concern sees it: the protocol (`complete`), what a turn holds, and the failures the loop
acts on. llama-server's client (agent/server/chat.py) is one implementation; the tests' scripted model another."""

from __future__ import annotations

import json
from typing import Any, Protocol

from pydantic import BaseModel

from agent.protocol.stats import RequestStats


class LLMError(Exception):
    """Ends the task; str() is a one-line reason."""


class ContextOverflow(LLMError):
    """The request does not fit the server's window; with the server's own counts when it said them (its
    exceed_context_size_error carries `n_prompt_tokens` and `n_ctx`)."""

    def __init__(self, reason: str, *, prompt_tokens: int | None = None, n_ctx: int | None = None) -> None:
        super().__init__(reason)
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx


class ModelUnavailable(LLMError):
    pass


class MalformedOutput(LLMError):
    pass


class ServerLost(ModelUnavailable):
    """The model server is gone for this task (it stopped answering, or a fleet has none left): the task is failed
    as lost, never taken for the model's answer."""


class RetriesExhausted(ServerLost):
    """The server kept failing transiently (connection errors, 5xx, idle timeouts) past the retry policy: a fleet
    takes such a server out of rotation (agent/dispatch/seats.py)."""


class ToolCall(BaseModel):
    id: str
    name: str
    arguments: str

    def history_arguments(self) -> str:
        """Arguments as they go back into the history. Chat templates parse them as a JSON object, so raw
        garbage from the model would make every later request fail; it is wrapped instead, still visible."""
        try:
            if isinstance(json.loads(self.arguments), dict):
                return self.arguments
        except json.JSONDecodeError:
            pass
        return json.dumps({"unparsed_arguments": self.arguments})


class AssistantTurn(BaseModel):
    content: str = ""
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] = []
    finish_reason: str | None = None
    stats: RequestStats = RequestStats()

    def to_message(self) -> dict[str, Any]:
        """The history entry: reasoning is sent back unchanged because the V4 template keeps it with tools."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning_content:
            message["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.history_arguments()},
                }
                for call in self.tool_calls
            ]
        return message


class ChatModel(Protocol):
    name: str

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn: ...
