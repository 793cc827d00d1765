"""One task through its stages, in order: workspace, then in its sandbox the baseline (while the repository is
packed), the loop, the gate and its repair rounds, then settle (a stale night task is first refreshed onto its
new base without the model, and goes this way only when that conflicts or regresses). And the one policy for what
stops a task: the night's deadline or its own limit (timed_out), a stop signal (interrupted), anything else costs
this task only (failed, its diff kept); either way it is settled and its worktree removed."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

from agent.protocol.events import TaskEnd, TaskStart
from agent.protocol.records import TaskSummary, now_iso
from agent.record.metrics import delta, measure
from agent.run.interrupt import Interrupted
from agent.run.stages.baseline import baseline_and_prompt
from agent.run.stages.commands import CommandFailed
from agent.run.stages.gate import OutsideShard, gate_with_repairs
from agent.run.stages.loop import run_loop, task_loop
from agent.run.stages.refresh import refresh
from agent.run.stages.sandbox import task_sandbox
from agent.run.stages.settle import already_committed, save_patch, settle, settle_unfinished
from agent.run.stages.task import TaskContext
from agent.run.stages.workspace import open_workspace, state_git
from agent.run.time_limit import TimeUp, skip_reason, task_end, time_limit
from agent.worktree.workspace import Workspace, author_identity, wip_ref
from sandbox import SandboxLost

if TYPE_CHECKING:
    from agent.gate.stage import GateRecord
    from agent.loop import LoopResult
    from agent.protocol.nights import PlannedTask
    from agent.record.progress import TaskProgress
    from agent.run.run import Run


# Tasks settled without a commit whose branch is deleted at their end.
EMPTY_BRANCH_STATUSES = ("failed", "no_changes")


def run_task(run: Run, context: TaskContext) -> TaskSummary:
    started = time.monotonic()
    config, index, task = context.config, context.index, context.task
    skipped = skip_reason(run.night)
    if skipped is not None:
        outcome = TaskSummary(
            index=index, task=task, repo=str(config.repo), status="skipped", verdict="skipped", reason=skipped
        )
        context.emit(TaskEnd(outcome=outcome))
        return outcome
    state = run.repos[config.repo]
    planned = run.tonight.planned(index) if run.tonight is not None else None
    if planned is not None and planned.action == "rebase":
        refreshed = _refreshed(run, context, planned)
        if refreshed is not None:
            return refreshed
        # It conflicts with the new base, or regresses there: the model does the task again on it.
    resumed = run.progress.in_flight.get(index) if run.progress is not None else None
    workspace = open_workspace(
        state, run_id=context.run_id, index=index, task=task, max_file_bytes=config.max_file_bytes, resumed=resumed
    )
    served = run.served_model(context.server_url)
    workspace.author = author_identity(config.author, served or run.model.name)  # the user stays the committer
    context.emit(
        TaskStart(
            text=task,
            branch=workspace.branch or "",
            repo=str(config.repo),
            base_commit=workspace.base_commit,
            resumed=resumed is not None,
        )
    )
    outcome = TaskSummary(
        index=index,
        task=task,
        repo=str(config.repo),
        status="failed",
        reason="",
        branch=workspace.branch,
        base_commit=workspace.base_commit,
        model=served,
    )
    counters_before = context.probe.read() if context.probe is not None else None
    try:
        # Settled before the process died: not done twice. (A new worktree's HEAD is its base by construction.)
        if resumed is not None and workspace.head() != workspace.base_commit:
            return already_committed(run.journal, workspace, outcome)
        end = task_end(run.night, config)
        with time_limit(*end) if end is not None else contextlib.nullcontext():
            result, check = _in_sandbox(run, context, workspace, resumed, end[0] if end is not None else None)
        context.loop = None  # its turns and requests are in the result from here on
        run.requests += result.requests
        task_delta = delta(context.probe.read(), counters_before) if context.probe is not None else None
        measure(outcome, result.requests, task_delta, run.speculation)
        outcome = settle(run.journal, workspace, outcome, result, check, run.trailers(context.index, outcome.model))
    except TimeUp as up:
        _settle_unfinished(run, context, workspace, outcome, "timed_out", f"{up.reason}: stopped at {now_iso()}")
    except Interrupted as stop:
        context.stopped_by = stop
        _settle_unfinished(run, context, workspace, outcome, "interrupted", f"interrupted by {stop.signal_name}")
    except Exception as error:  # the next task still deserves its chance
        # A `before` command that failed, a shard's work outside its scope and a sandbox that vanished and could not
        # be replaced name themselves; anything else is our fault.
        if isinstance(error, (CommandFailed, OutsideShard)):
            outcome.reason = str(error)
        elif isinstance(error, SandboxLost):
            outcome.lost, outcome.reason = "sandbox", str(error)
        else:
            outcome.reason = f"internal error: {error.__class__.__name__}: {error}"
        with contextlib.suppress(Exception):  # keep what the model did so far for the morning
            save_patch(run.journal, workspace, outcome)
    finally:
        context.workspace = None
        outcome.wall_time_s = round(time.monotonic() - started, 3)
        # A settled task that made no commit leaves no branch (its work so far is in patch.diff); an interrupted
        # one keeps it: resume reopens it.
        empty = outcome.commit is None and outcome.status in EMPTY_BRANCH_STATUSES
        if empty:
            outcome.branch = None
        context.emit(TaskEnd(outcome=outcome))
        with contextlib.suppress(Exception):  # settled (task_end is written): the snapshots served their turn
            workspace.drop_ref(wip_ref(context.run_id, index))
        workspace.remove()
        if empty:
            with contextlib.suppress(Exception):  # moved since (someone's work) or gone: not ours to delete then
                workspace.drop_branch()
    return outcome


def _refreshed(run: Run, context: TaskContext, planned: PlannedTask) -> TaskSummary | None:
    """A stale night task whose base moved: its commit replayed onto the new base and gated there, without the
    model; the outcome to publish when it applied cleanly and did not regress, else None."""
    state = run.repos[context.config.repo]
    if planned.previous_tip is None or state.base is None or state.environment is None:
        return None
    started = time.monotonic()
    safe_git = state_git(state)
    try:
        since = safe_git.run("merge-base", planned.previous_tip, state.base).decode().strip()
        commits = safe_git.run("rev-list", "--reverse", f"{since}..{planned.previous_tip}").decode().split()
        trial = refresh(
            repo=state.repo,
            sandboxes=run.sandboxes,
            environment=state.environment,
            config=context.config,
            task=context.index,
            branch=planned.branch,
            tip=planned.previous_tip,
            onto=state.base,
            commits=commits,
            cache=run.baselines,
            run_id=context.run_id,
            emit=context.emit,
            scratch_root=state.scratch,
        )
    except Exception:  # the model's way still works: the task is done again on the new base
        return None
    if trial.outcome != "clean" or trial.rebased_commit is None or trial.verdict is None:
        return None
    outcome = TaskSummary(
        index=context.index,
        task=context.task,
        repo=str(context.config.repo),
        status="committed",
        verdict=trial.verdict,  # type: ignore[arg-type]
        reason=f"rebased onto {state.base[:12]} without the model; gate: {trial.reason}",
        base_commit=state.base,
        commit=trial.rebased_commit,
        wall_time_s=round(time.monotonic() - started, 3),
    )
    context.emit(TaskEnd(outcome=outcome))
    return outcome


def _in_sandbox(
    run: Run, context: TaskContext, workspace: Workspace, resumed: TaskProgress | None, end: float | None
) -> tuple[LoopResult, GateRecord]:
    environment = run.repos[context.config.repo].environment
    with task_sandbox(
        context, workspace, sandboxes=run.sandboxes, environment=environment, baselines=run.baselines
    ) as sandbox:
        resuming = resumed is not None and bool(resumed.messages)
        system = baseline_and_prompt(sandbox.gate, workspace, context, resuming=resuming)
        boundaries = system.boundaries if system is not None else ()
        loop = context.loop = task_loop(context, sandbox.tools, end, workspace, boundaries)
        # From here until the task settles, each tool result snapshots the files: in the repair rounds too, so a
        # kill during one resumes with the files of that round's tool calls (the transcript has their results).
        context.workspace = workspace
        result = run_loop(loop, system.text if system is not None else None, context, sandbox.test_command, resumed)
        return gate_with_repairs(
            sandbox.gate,
            loop,
            result,
            workspace,
            repair_rounds=context.config.repair_rounds,
            emit=context.emit,
            after=context.config.after,
            shard=context.config.shard,
        )


def _settle_unfinished(
    run: Run, context: TaskContext, workspace: Workspace, outcome: TaskSummary, status: str, reason: str
) -> None:
    """A task stopped before its end (interrupted, timed_out): its turns so far, then settled as it stands."""
    outcome.status = outcome.verdict = status  # type: ignore[assignment]
    outcome.reason = reason
    if context.loop is not None:
        outcome.turns = context.loop.turn
        outcome.compactions = list(context.loop.compactions)
        run.requests += context.loop.requests
        measure(outcome, context.loop.requests, None, run.speculation)
    settle_unfinished(run.journal, workspace, outcome, status, run.trailers(context.index, outcome.model))
