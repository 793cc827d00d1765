"""How many tokens the repository may take: the server's window minus the answer's reserve and the conversation."""

from __future__ import annotations

from pydantic import BaseModel

from agent.packing.options import PackError, PackOptions
from agent.protocol.effort import Effort

# Max effort may reason for a very long time before answering; low effort answers almost at once.
OUTPUT_RESERVE_TOKENS: dict[Effort, int] = {"low": 16_384, "high": 65_536, "max": 131_072}
# Small windows (tests, small models) cannot give up a fixed 128k: the reserve is capped at a share of the window.
MAX_RESERVE_SHARE = 0.25
# Tool results, edits and the model's replies accumulate after the packed repository.
CONVERSATION_HEADROOM_SHARE = 0.125


class Budget(BaseModel):
    tokens: int | None  # None: unlimited
    source: str


def context_budget(n_ctx: int, effort: Effort, output_reserve_tokens: int | None) -> int:
    reserve = output_reserve_tokens
    if reserve is None:
        reserve = min(OUTPUT_RESERVE_TOKENS[effort], int(n_ctx * MAX_RESERVE_SHARE))
    headroom = int(n_ctx * CONVERSATION_HEADROOM_SHARE)
    return max(0, n_ctx - reserve - headroom)


def resolve_budget(options: PackOptions) -> Budget:
    if options.budget_tokens is not None:
        return Budget(tokens=options.budget_tokens, source="given")
    if options.server_url is None:
        return Budget(tokens=None, source="unlimited (no server to size the window)")
    # lazy: the HTTP client (httpx) loads only when a server sizes the budget: `pack` is timed per task
    from agent.server.api import LlamaServerAPI, ServerError

    try:
        with LlamaServerAPI(options.server_url) as api:
            n_ctx = api.context_size()
    except ServerError as exc:
        raise PackError(f"cannot size the budget: {exc}") from exc
    tokens = context_budget(n_ctx, options.effort, options.output_reserve_tokens)
    return Budget(tokens=tokens, source=f"server n_ctx {n_ctx} minus output reserve and conversation headroom")
