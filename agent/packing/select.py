"""Fill a token budget in rank order: whole files first, then outlines of the rest, then bare paths."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

View = Literal["full", "outline", "path", "dropped"]
# Whole files may not crowd out every outline: this share of the budget is held back for outlines, and whatever
# outlines leave of it goes to whole files again.
OUTLINE_RESERVE_SHARE = 0.2
# Outlines are made on demand (a parse each): once this many in a row did not fit, the budget is deemed full.
MAX_OUTLINE_MISSES = 32


class Candidate(NamedTuple):  # made for every file in every selection round: a tuple is made 8x faster
    index: int
    full: int
    outlinable: bool  # a grammar applies and the file defines something: an outline may exist
    path: int  # its line in the list of files not shown


def fill_budget(ranked: list[Candidate], available: int, outline_cost: Callable[[int], int | None]) -> dict[int, View]:
    """Views per candidate index. outline_cost(index) gives the cost of a file's outline (None: it has none);
    it is asked in rank order and only as far as needed. Deterministic: only rank order and costs decide."""
    views: dict[int, View] = {candidate.index: "path" for candidate in ranked}
    used = sum(candidate.path for candidate in ranked)
    for candidate in reversed(ranked):
        if used <= available:
            break
        views[candidate.index] = "dropped"
        used -= candidate.path
    listed = [candidate for candidate in ranked if views[candidate.index] == "path"]
    outlines: dict[int, int] = {}

    def upgrade(candidate: Candidate, view: View, cost: int, limit: int) -> bool:
        nonlocal used
        current = views[candidate.index]
        current_cost = candidate.path if current == "path" else outlines.get(candidate.index, 0)
        if used - current_cost + cost > limit:
            return False
        views[candidate.index] = view
        used += cost - current_cost
        return True

    reserve = int(available * OUTLINE_RESERVE_SHARE) if any(c.outlinable for c in listed) else 0
    for candidate in listed:
        upgrade(candidate, "full", candidate.full, available - reserve)
    misses = 0
    for candidate in listed:
        if misses >= MAX_OUTLINE_MISSES:
            break
        if views[candidate.index] != "path" or not candidate.outlinable:
            continue
        cost = outline_cost(candidate.index)
        if cost is None or cost >= candidate.full:
            continue
        outlines[candidate.index] = cost
        misses = 0 if upgrade(candidate, "outline", cost, available) else misses + 1
    for candidate in listed:
        if views[candidate.index] != "full":
            upgrade(candidate, "full", candidate.full, available)
    return views
