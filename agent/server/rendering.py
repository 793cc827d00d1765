"""What the server's own chat template makes of a request: its prompt tokens, and the prefix every task on one
system message and tool list shares, computed from the template alone.

The shared prefix is where rendering `[system, user]` stops depending on the user message. It is taken as the
common *token* prefix of renderings with probe user messages whose first characters differ in kind, never by
searching the text for the template's user marker (a repository may spell it, and a tokenizer may join the
marker's last character with the user text's first: SmolLM2's BPE turns `>` + `A` into one token, so the common
text prefix can tokenize one token longer than any task's prompt shares). Requests render through `chat_body`,
the one owner of the fields that shape a rendering, so what is computed here is what the chat request sends.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agent.server.api import LlamaServerAPI
from agent.server.chat import chat_body

# First characters of different kinds (letter cases, digit, whitespace, punctuation, markup, a full-width bar
# like the one in DeepSeek's markers): a tokenizer that merges across the marker's end merges with some of them.
PROBE_TEXTS = ("A", "b", "1", "\n", " ", "<", "｜", ".")


def common_prefix(first: list[int], second: list[int]) -> int:
    """How many leading tokens two token lists share (a binary search over slice comparisons, which run in C: a
    prompt is hundreds of thousands of tokens)."""
    shared, unequal = 0, min(len(first), len(second)) + 1
    while unequal - shared > 1:
        middle = (shared + unequal) // 2
        if first[:middle] == second[:middle]:
            shared = middle
        else:
            unequal = middle
    return shared


class Rendering:
    """Renders and tokenizes requests with one server's template (`/apply-template`, then `/tokenize` as the chat
    endpoint tokenizes a prompt: special tokens parsed, BOS added where the model wants one)."""

    def __init__(self, api: LlamaServerAPI, effort: str) -> None:
        self.api = api
        self.effort = effort
        self._shared: dict[str, list[int]] = {}  # per system message and tool list: tasks on one commit ask once

    def prompt_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        """The tokens the chat request with these messages and tools is processed as."""
        prompt = self.api.apply_template(chat_body(messages, tools, self.effort))
        return self.api.tokenize(prompt, add_special=True)

    def shared_prefix(self, system: str, tools: list[dict[str, Any]]) -> list[int]:
        """The tokens every task's first request on this system message and tool list starts with."""
        key = hashlib.sha256(json.dumps([system, tools], ensure_ascii=False).encode(errors="surrogatepass"))
        digest = key.hexdigest()
        if digest not in self._shared:
            probes = [self.prompt_tokens(_task(system, text), tools) for text in PROBE_TEXTS]
            shared = probes[0]
            for probe in probes[1:]:
                shared = shared[: common_prefix(shared, probe)]
            self._shared[digest] = shared
        return self._shared[digest]

    def boundary_tokens(
        self, system: str, offsets: list[int], tools: list[dict[str, Any]], full: list[int]
    ) -> list[int]:
        """For each character offset into the system message (where a tier of the packed repository ends), how
        many of `full`'s tokens (a prompt on this system message) come before it: the common prefix of `full` with
        the rendering of the system message cut there, so each count is an exact prefix of `full` by construction
        (a token the cut splits is left out)."""
        cut = [self.prompt_tokens(_task(system[:offset], PROBE_TEXTS[0]), tools) for offset in offsets]
        return [common_prefix(tokens, full) for tokens in cut]


def _task(system: str, user: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
