"""How full the server's window is: the next request's size, predicted from the tokens the server reported for the
last one, and the threshold past which the conversation is compacted (agent/conversation/compactor.py).

After a reply the slot holds the prompt and the generated tokens (`prompt_tokens + completion_tokens`); the next
request adds only the messages appended since, estimated from their characters. The estimate decides only when even
a token for every byte of the new messages stays under the threshold (a tokenizer's token covers at least a byte:
`seq 1 450` is about a token a character where the estimate says 0.3); otherwise the server counts the whole request
(`/v1/chat/completions/input_tokens`), and a conversation the window has not seen yet (the first request, a resume,
after a compaction) is always counted exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent.packing.tokens import DEFAULT_TOKENS_PER_BYTE
from agent.protocol.stats import RequestStats

Count = Callable[[list[dict[str, Any]]], int]  # the tokens a request with these messages takes, as rendered

# A compaction aims below this share of the threshold, so that the next turn does not have to compact again.
RELIEF = 0.8
# The chat template's markup around one message (role markers, a tool result's tags), in tokens.
MESSAGE_MARKUP_TOKENS = 10


def message_texts(message: dict[str, Any]) -> list[str]:
    """The texts of a message that reach the prompt: its content, its reasoning, its calls' names and arguments."""
    texts = [str(message.get("content") or ""), str(message.get("reasoning_content") or "")]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        texts += [str(function.get("name") or ""), str(function.get("arguments") or "")]
    return texts


def estimated_tokens(messages: list[dict[str, Any]]) -> int:
    chars = (sum(len(text) for text in message_texts(m)) for m in messages)
    return sum(int(count * DEFAULT_TOKENS_PER_BYTE) + MESSAGE_MARKUP_TOKENS for count in chars)


def most_tokens(messages: list[dict[str, Any]]) -> int:
    """The most tokens the messages can take: a token for every byte of their texts, and their markup."""
    return sum(sum(len(text.encode()) for text in message_texts(m)) + MESSAGE_MARKUP_TOKENS for m in messages)


class ContextWindow:
    def __init__(self, n_ctx: int, compact_at: float, count: Count) -> None:
        """n_ctx: the server's window per slot; compact_at: the share of it past which the conversation is
        compacted; count: the server's exact count of a request."""
        self.n_ctx = n_ctx
        self.compact_at = compact_at
        self.threshold = int(n_ctx * compact_at)
        self.target = int(self.threshold * RELIEF)
        self._count = count
        # (how many leading messages, their tokens): what the server last reported or counted. A compaction's new
        # list goes through exact(), so a list at least as long is this one extended.
        self._known: tuple[int, int] | None = None

    def observe(self, messages: list[dict[str, Any]], stats: RequestStats) -> None:
        """After a reply (already appended to `messages`): the slot holds the prompt and the generated tokens."""
        if stats.prompt_tokens:
            self._remember(messages, stats.prompt_tokens + stats.completion_tokens)

    def exact(self, messages: list[dict[str, Any]]) -> int:
        tokens = self._count(messages)
        self._remember(messages, tokens)
        return tokens

    def size(self, messages: list[dict[str, Any]]) -> int:
        """The tokens a request with `messages` takes: estimated from the last known size while the new messages
        cannot pass the threshold, else counted, and counted when the window knows nothing of the conversation."""
        known = self._known
        if known is None or len(messages) < known[0]:
            return self.exact(messages)
        new = messages[known[0] :]
        if known[1] + most_tokens(new) >= self.threshold:
            return self.exact(messages)
        return known[1] + estimated_tokens(new)

    def ran_into(self, stats: RequestStats) -> bool:
        """A reply generated until the window was full (llama-server then ends it with finish_reason `length`)."""
        return stats.prompt_tokens + stats.completion_tokens >= self.n_ctx - 1

    def _remember(self, messages: list[dict[str, Any]], tokens: int) -> None:
        self._known = (len(messages), tokens)
