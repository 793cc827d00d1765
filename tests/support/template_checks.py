"""Does a request exactly extend what the server's slot holds? The template tier's check, on played exchanges.

Request to request is not enough (V4_PLAN §1.1): every request ends with the generation prompt
`<｜Assistant｜><think>`, so a next request that renders `<｜Assistant｜><think></think>` (its reasoning dropped) still
extends it byte for byte. What the next request must extend is what the slot holds after the reply: the previous
prompt continued by the reply as the model generated it (`Exchange.held`). Three checks against it, then the request
to request one:
- the text: the new rendering starts with the held text;
- the tokens: the new prompt's tokens share all but at most the last of the held tokens — SmolLM2's BPE joins a
  turn's last character with the `<` of `<｜end▁of▁sentence｜>` (`.<`, `><`), a join V4's special tokens never make;
- the server: the cached tokens it reported are the common prefix of the held tokens and the tokens it was sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from support.played_server import Exchange
from support.scripted_server import common_prefix

# Characters shown on each side of a divergence, and tokens after it.
SHOWN_CHARS = 60
SHOWN_TOKENS = 5


@dataclass(frozen=True)
class Divergence:
    what: str  # "text", "tokens", "cached" or "request"
    detail: str

    def __str__(self) -> str:
        return f"{self.what}: {self.detail}"


def _text_divergence(what: str, was: str, now: str) -> Divergence | None:
    if now.startswith(was):
        return None
    at = common_prefix(was, now)
    return Divergence(
        what,
        f"differs at character {at} of {len(was)}: was {was[max(0, at - SHOWN_CHARS) : at + SHOWN_CHARS]!r}, "
        f"now {now[max(0, at - SHOWN_CHARS) : at + SHOWN_CHARS]!r}",
    )


def _token_divergence(what: str, was: list[int], now: list[int]) -> Divergence | None:
    shared = common_prefix(was, now)
    if shared >= len(was) - 1:
        return None
    return Divergence(
        what,
        f"{shared} of {len(was)} tokens shared: was {was[shared : shared + SHOWN_TOKENS]}, "
        f"now {now[shared : shared + SHOWN_TOKENS]}",
    )


def check_extension(previous: Exchange, exchange: Exchange) -> Divergence | None:
    """None when `exchange` exactly extends what the slot held after `previous` (both served replies)."""
    if previous.held is None:
        raise ValueError("the previous exchange was not served: the slot holds what came before it")
    divergence = _text_divergence("text", previous.held, exchange.prompt) or _token_divergence(
        "tokens", previous.held_tokens, exchange.tokens
    )
    if divergence is not None:
        return divergence
    expected = common_prefix(previous.held_tokens, exchange.held_tokens)
    if exchange.cached_tokens != expected:
        return Divergence("cached", f"the server reused {exchange.cached_tokens} tokens, the prompts share {expected}")
    return _text_divergence("request", previous.prompt, exchange.prompt) or _token_divergence(
        "request", previous.tokens, exchange.tokens
    )


def served(exchanges: list[Exchange]) -> list[Exchange]:
    """The exchanges the server answered with a reply (a refused request leaves the slot as it was)."""
    return [exchange for exchange in exchanges if exchange.status == 200 and exchange.held is not None]


def divergences(exchanges: list[Exchange]) -> list[tuple[int, Divergence]]:
    """Every served exchange checked against the one before it: (its index among them, what broke)."""
    answered = served(exchanges)
    found = [(index, check_extension(before, after)) for index, (before, after) in enumerate(pairwise(answered), 1)]
    return [(index, divergence) for index, divergence in found if divergence is not None]
