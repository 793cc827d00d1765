"""What a night does with each task, decided from git and the task's record alone (no model is asked): the first
row of the table that applies wins (NIGHTS_PLAN §3.3; README "Night after night")."""

from __future__ import annotations

from dataclasses import dataclass

from agent.nights.default_branch import DefaultBranch
from agent.protocol.config import TaskSpec
from agent.protocol.nights import Action, Fate, Fingerprint, MergedBy, TaskRecord

RERUN_STATUSES = frozenset({"failed", "timed_out", "interrupted", "skipped"})
REASON_CHARS = 80


@dataclass(frozen=True)
class Merge:
    by: MergedBy
    commit: str | None = None  # the default branch's commit that holds it (trailer, patch_id)


@dataclass(frozen=True)
class TaskFacts:
    spec: TaskSpec | None  # None: no longer in the night file
    record: TaskRecord | None  # None: never seen
    fingerprint: Fingerprint
    tip: str | None  # the stable branch now (None: absent)
    checked_out: str | None  # the worktree that has it checked out
    default: DefaultBranch
    merged: Merge | None
    conflicts: list[str] | None  # merge-tree's conflicted paths onto the default branch; None: not checked


def _short(commit: str | None) -> str:
    return (commit or "none")[:12]


def _merged_reason(merge: Merge, name: str) -> str:
    where = f"{name} ({_short(merge.commit)})" if merge.commit is not None else name
    return {
        "ancestor": f"merged: its commit is in {name}",
        "patch_id": f"merged: the same patch is in {where}",
        "trailer": f"merged: its Refactor-Agent-Task trailer is in {where}",
        "contained": f"merged: {name} holds all of its change",
        "empty_rebase": f"merged: rebased onto {name} it changes nothing",
    }[merge.by]


def _table(facts: TaskFacts, *, retry_discarded: bool) -> tuple[Action, str, bool]:
    """(action, reason, whether it failed last night)."""
    record, default = facts.record, facts.default
    name, base = default.name, default.commit
    if facts.spec is None:  # merged is looked for only for a shard its task no longer has
        if facts.merged is not None:
            return "retire", _merged_reason(facts.merged, name), False
        return "archive", "no longer in the night file: branch kept, never updated", False
    if record is None:
        return "run", "new task", False
    if record.fate == "queued":
        return "run", "waited for max_open last night", False
    repeat = facts.spec.repeat
    if facts.merged is not None:
        if not repeat:
            return "retire", _merged_reason(facts.merged, name), False
        return "run", f"merged; repeat = true: runs again on {_short(base)}", False
    if facts.tip is not None and facts.tip != record.tip:
        left = f"not the {_short(record.tip)} it left" if record.tip is not None else "it left no branch there"
        return "leave", f"changed outside refactor-agent (at {_short(facts.tip)}, {left}): left alone", False
    if facts.checked_out is not None:
        return "leave", f"checked out in {facts.checked_out}: left alone", False
    if record.fate == "discarded" or (facts.tip is None and record.tip is not None):
        why = (
            f"discarded by review discard on {record.discarded_at[:10]}"
            if record.fate == "discarded" and record.discarded_at is not None
            else "discarded: its branch was deleted"
        )
        return ("run", "discarded; --retry discarded", False) if retry_discarded else ("skip", why, False)
    if facts.fingerprint != record.fingerprint:
        return "run", f"settings changed: {facts.fingerprint.changed(record.fingerprint)}", False
    if record.status in RERUN_STATUSES or record.verdict == "regressed":
        last = record.outcomes[-1].reason if record.outcomes else ""
        word = "regressed" if record.verdict == "regressed" else record.status
        return "run", f"last night {word}: {last[:REASON_CHARS]}", True
    if record.status == "no_changes":
        if base == record.base:
            return "keep", f"no changes needed at {name} ({_short(base)})", False
        return "run", f"no changes last night; {name} moved", False
    if base == record.base:
        return "keep", f"{record.verdict} on {name} ({_short(base)}), settings unchanged", False
    if repeat:
        return "run", f"{name} moved; repeat = true", False
    if facts.conflicts:
        paths = ", ".join(facts.conflicts[:3])
        return "run", f"{name} moved and conflicts with it ({paths}): the model runs again on {_short(base)}", False
    return "rebase", f"{name} moved ({_short(record.base)} → {_short(base)}): rebase, run the tests, no model", False


def decide(facts: TaskFacts, *, only_failed: bool = False, retry_discarded: bool = False) -> tuple[Action, str]:
    action, reason, failed = _table(facts, retry_discarded=retry_discarded)
    if only_failed and action in ("run", "rebase") and not failed:
        return "skip", "not failed last night (--only failed)"
    return action, reason


def wait_for_places(shards: list[tuple[Action, str, Fate]], max_open: int) -> list[tuple[Action, str]]:
    """A sharded task's `max_open` over its shards' (action, reason, fate), in the shards' order: a shard that
    waits for review (or was moved by hand) holds a place whatever tonight does with it; the others that would run
    take the places left, in order, and the rest wait for a later night (a merged or discarded one frees its place)."""
    open_fates, leaving = ("waiting", "outside"), ("retire", "skip", "archive")
    holding = sum(1 for action, _, fate in shards if fate in open_fates and action not in leaving)
    places = max_open - holding
    decided: list[tuple[Action, str]] = []
    for action, reason, fate in shards:
        if action == "run" and fate not in open_fates:
            places -= 1
            if places < 0:
                decided.append(("wait", f"max_open = {max_open}: {max_open} of its shards are open"))
                continue
        decided.append((action, reason))
    return decided
