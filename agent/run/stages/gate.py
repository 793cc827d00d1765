"""The gate stage: finished work checked against the baseline; regressions go back to the model for repair."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from agent.gate.infrastructure import IGNORED_PATHSPECS
from agent.gate.results import failure_lines
from agent.gate.stage import Gate, GateRecord
from agent.gate.syntax import MAX_CHECKED_BYTES
from agent.gate.verdict import GateCheck, repair_message
from agent.loop import AgentLoop, LoopResult
from agent.nights.shards import outside_scope
from agent.protocol.config import Shard
from agent.protocol.events import Event, GateEvent, Repair
from agent.protocol.records import GateEvidence
from agent.run.stages.commands import run_commands
from agent.safety.printable import counted, printable
from agent.worktree.workspace import Workspace


def gate_with_repairs(
    gate: Gate,
    loop: AgentLoop,
    result: LoopResult,
    workspace: Workspace,
    *,
    repair_rounds: int,
    emit: Callable[[Event], None],
    after: list[str],
    shard: Shard | None = None,
) -> tuple[LoopResult, GateRecord]:
    """Check the finished work; on regressions ask for a repair, at most `repair_rounds` times. Work that a repair
    round left unfinished (turn limit, model error) is checked once more as it stands. The `after` commands run
    before each check; one that fails makes the check regressed, its output the repair message. A shard's work
    that changed files outside its scope is sent back the same way (before any test runs), and fails the task
    (OutsideShard) if it still does at the end."""
    record = GateRecord(baseline=gate.baseline_run)
    while result.outcome in ("finished", "stopped") or record.repair_rounds:
        failure = run_commands(gate.executor, after, "after", timeout_s=gate.timeout_s) if after else None
        changed = workspace.changed_paths()
        outside = outside_scope(shard, changed) if shard is not None else []
        if outside:
            if result.outcome not in ("finished", "stopped") or record.repair_rounds >= repair_rounds:
                break
            record.repair_rounds += 1
            reason = _outside(shard, outside)
            emit(Repair(round=record.repair_rounds, reason=reason))
            result = loop.resume(f"Not done: you {reason}. {shard.scope} Undo those changes, then call finish.")
            continue
        unstaged = [*workspace.uncommitted_files, *workspace.ignored_files(IGNORED_PATHSPECS)]
        read = partial(workspace.files_at, limit=MAX_CHECKED_BYTES)
        if failure is not None:
            record.check = failure.check()
            emit(GateEvent(verdict=record.check.verdict, reason=record.check.reason))
        else:
            record.check = gate.check(changed, read, unstaged=unstaged) if changed else None
        if record.check is not None and record.check.comparison is not None:
            record.rounds.append(len(record.check.comparison.regressed))
        finished = result.outcome in ("finished", "stopped")
        if record.check is None or record.check.verdict != "regressed" or not finished:
            break
        if record.repair_rounds >= repair_rounds:
            break
        record.repair_rounds += 1
        emit(Repair(round=record.repair_rounds, reason=record.check.reason))
        result = loop.resume(failure.repair_message() if failure is not None else repair_message(record.check))
    outside = outside_scope(shard, workspace.changed_paths()) if shard is not None else []
    if outside:
        raise OutsideShard(f"the work {_outside(shard, outside)}: {shard.scope}")
    return result, record


class OutsideShard(Exception):
    """A shard's work still changes files outside its scope: str() is the task's reason (the task fails, its
    diff kept in the run's records)."""


def _outside(shard: Shard | None, paths: list[str]) -> str:
    named = ", ".join(printable(path, one_line=True) for path in paths[:5])
    more = f" and {len(paths) - 5} more" if len(paths) > 5 else ""
    label = shard.label if shard is not None else ""
    return f"changed {counted(len(paths), 'file')} outside the shard {label} ({named}{more})"


def evidence(record: GateRecord, check: GateCheck) -> GateEvidence:
    """What the report, the trailers and `review` show of the gate's work."""
    comparison = check.comparison
    lists = comparison.model_dump() if comparison is not None else {}
    details = check.final.details if check.final is not None else {}
    failures = {test: failure_lines(details[test]) for test in lists.get("regressed", []) if details.get(test)}
    return GateEvidence(
        failures=failures,
        rounds=record.rounds,
        baseline=record.baseline.describe() if record.baseline else None,
        final=check.final.describe() if check.final else None,
        syntax_errors=check.syntax_errors,
        test_infrastructure=check.test_infrastructure,
        repair_rounds=record.repair_rounds,
        **lists,
    )
