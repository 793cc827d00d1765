"""Fill a token budget in rank order: whole files first, then outlines of the rest, then bare paths."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

View = Literal["full", "outline", "path", "dropped"]
# Whole files may not crowd out every outline: at most this share of the budget is held back for outlines.
OUTLINE_RESERVE_SHARE = 0.2


@dataclass(frozen=True, slots=True)
class Candidate:
    index: int
    full: int
    outline: int | None  # None: no outline for this file (unknown language, nothing defined)
    path: int  # its line in the list of files not shown


def fill_budget(ranked: list[Candidate], available: int) -> dict[int, View]:
    """Views per candidate index. Deterministic: only rank order and costs decide."""
    views: dict[int, View] = {candidate.index: "path" for candidate in ranked}
    used = sum(candidate.path for candidate in ranked)
    for candidate in reversed(ranked):
        if used <= available:
            break
        views[candidate.index] = "dropped"
        used -= candidate.path
    listed = [candidate for candidate in ranked if views[candidate.index] == "path"]

    def upgrade(candidate: Candidate, view: View, cost: int, limit: int) -> None:
        nonlocal used
        current = views[candidate.index]
        current_cost = candidate.path if current == "path" else candidate.outline or 0
        if used - current_cost + cost <= limit:
            views[candidate.index] = view
            used += cost - current_cost

    outline_gain = sum(max(0, c.outline - c.path) for c in listed if c.outline is not None)
    reserve = min(outline_gain, int(available * OUTLINE_RESERVE_SHARE))
    for candidate in listed:
        upgrade(candidate, "full", candidate.full, available - reserve)
    for candidate in listed:
        if views[candidate.index] == "path" and candidate.outline is not None and candidate.outline < candidate.full:
            upgrade(candidate, "outline", candidate.outline, available)
    for candidate in listed:
        if views[candidate.index] != "full":
            upgrade(candidate, "full", candidate.full, available)
    return views
