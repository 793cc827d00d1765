"""The settle stage, outside the loop: the verdict, the commit with its trailers, the patch in the run's records.

Work the gate checked is committed whatever its verdict (nothing the model did is thrown away); the trailers carry
the evidence. A task stopped before its end (interrupted, timed out) is committed as it stands, marked so.
"""

from __future__ import annotations

import contextlib

from agent.gate.stage import GateRecord
from agent.gate.verdict import (
    INFRASTRUCTURE_TRAILER,
    TESTS_TRAILER,
    VERDICT_TRAILER,
    read_trailers,
    split_tests_trailer,
    verdict_trailers,
)
from agent.loop import LoopResult
from agent.protocol.records import GateEvidence, TaskSummary, unmarked
from agent.record.journal import PATCH_MAX_BYTES, RunJournal
from agent.record.report import split_patch
from agent.run.stages.gate import evidence
from agent.worktree.workspace import Workspace


def save_patch(journal: RunJournal, workspace: Workspace, outcome: TaskSummary, *, staged: bool = False) -> None:
    """The task's diff into patch.diff (capped; a cut patch names the commit that holds it whole). `staged`: right
    after a commit, which staged the files as they are."""
    diff = workspace.diff(max_bytes=PATCH_MAX_BYTES, staged=staged)
    outcome.uncommitted_files = workspace.uncommitted_files
    full_change = f"commit {outcome.commit} on {outcome.branch}" if outcome.commit else None
    header = f"task {outcome.index}: {outcome.task}"
    journal.append_patch(header, diff.data, total_bytes=diff.total_bytes, full_change=full_change)


def settle(
    journal: RunJournal,
    workspace: Workspace,
    outcome: TaskSummary,
    result: LoopResult,
    record: GateRecord,
    trailers: dict[str, str],
) -> TaskSummary:
    outcome.turns = result.turns
    outcome.compactions = list(result.compactions)
    outcome.summary = result.summary
    outcome.reason = result.reason
    outcome.rejected_calls, outcome.last_error = result.rejected, result.last_error
    outcome.lost, outcome.capped = result.lost, result.capped
    check = record.check
    failed = result.outcome in ("max_turns", "error") and check is None
    if not failed:
        trailers = dict(trailers)
        if check is not None:
            outcome.tests = evidence(record, check)
            outcome.reason = f"{result.reason}; gate: {check.reason}"
            trailers.update(verdict_trailers(record.baseline, check))
        message = result.summary.strip() or f"refactor-agent: {outcome.task}"
        outcome.commit = workspace.commit(message, trailers)
    # After the commit, so a cut patch can name it; a commit that fails still gets the patch (the runner). The sandbox
    # is gone: nothing changed the files since the commit staged them.
    save_patch(journal, workspace, outcome, staged=not failed)
    outcome.status = "failed" if failed else "committed" if outcome.commit else "no_changes"
    if failed:
        outcome.verdict = "failed"
    else:
        outcome.verdict = check.verdict if check is not None and outcome.commit else "no_changes"
    return outcome


def settle_unfinished(
    journal: RunJournal, workspace: Workspace, outcome: TaskSummary, status: str, trailers: dict[str, str]
) -> None:
    """Keep what the model did so far: as a commit marked with the status (interrupted, timed_out) on the task
    branch, and in patch.diff. The sandbox is already gone (the signal unwound through its `with`), so nothing
    changes the worktree any more."""
    with contextlib.suppress(Exception):
        outcome.commit = workspace.commit(
            f"refactor-agent: {outcome.task} ({status.replace('_', ' ')}, unfinished)",
            {**trailers, "Refactor-Agent-Status": status},
        )
    with contextlib.suppress(Exception):  # after the commit, so a cut patch can name it
        save_patch(journal, workspace, outcome)


def already_committed(journal: RunJournal, workspace: Workspace, outcome: TaskSummary) -> TaskSummary:
    """The task's commit was made, but the process died before it recorded the task as settled."""
    outcome.commit = workspace.head()
    message = workspace.git.run("log", "-1", "--format=%B", outcome.commit).decode("utf-8", errors="replace")
    trailers = read_trailers(message)
    outcome.status = "committed"
    verdict = trailers.get(VERDICT_TRAILER)
    outcome.verdict = unmarked(verdict) if verdict else trailers.get("Refactor-Agent-Status", "unverified")
    outcome.tests = _evidence_from(trailers)
    outcome.reason = "committed before the process stopped; recorded on resume"
    patch = journal.directory / "patch.diff"
    recorded = split_patch(patch.read_text(encoding="utf-8", errors="replace")) if patch.exists() else {}
    if outcome.index not in recorded:  # the kill came between the commit and its patch
        save_patch(journal, workspace, outcome)
    return outcome


def _evidence_from(trailers: dict[str, str]) -> GateEvidence | None:
    """What the trailers kept of the gate's evidence: the tests before and after, and the test infrastructure the
    task changed (so a verdict that rests on it stays marked)."""
    tests = split_tests_trailer(trailers.get(TESTS_TRAILER, ""))
    infrastructure = [path for path in trailers.get(INFRASTRUCTURE_TRAILER, "").split(", ") if path]
    if tests is None and not infrastructure:
        return None
    baseline, final = tests if tests is not None else (None, None)
    return GateEvidence(baseline=baseline, final=final, test_infrastructure=infrastructure)
