"""Wires a run together: preflight, repository locks, journal, a named night's planning pass (agent/nights/), model,
view, --on-finish; returns the exit code."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from agent.commands import EXIT_USAGE
from agent.dispatch.local import local_dispatch
from agent.dispatch.ray_head import RayDispatch
from agent.nights.claim import claim, refuse_a_second_night_file
from agent.nights.errors import NightError
from agent.nights.fates import night_fates
from agent.nights.plan import (
    PLAN_RECORD,
    PlanOptions,
    commit_plan,
    plan_lines,
    plan_night,
)
from agent.nights.supersede import supersede
from agent.nights.tonight import Tonight
from agent.protocol.config import NightConfig
from agent.protocol.nights import NightPlan
from agent.protocol.records import RunSummary, now_iso
from agent.record.journal import NIGHT_RECORD, OUTPUT_LOG, RunJournal, new_run_id
from agent.record.last_runs import remember
from agent.record.live import RunView
from agent.record.progress import read_progress
from agent.record.report import verdict_counts
from agent.retention.plan import Stores, collect_garbage, collection_lines
from agent.run.compose import build_run
from agent.run.interrupt import Interrupted, stop_signals
from agent.run.lock import LockHeld, RepoLock
from agent.run.preflight import PreflightError, Prepared, preflight
from agent.run.run import TaskDispatch
from agent.run.sandboxes import docker_sandboxes
from agent.safety.printable import counted
from agent.server.api import is_embedded
from agent.server.paths import default_kv_cache_dir
from agent.settings.runs_dir import runs_dir_to_read
from agent.worktree.leftovers import HOOKS_SCRATCH_PREFIX, build_scratch, sweep_all_scratch
from agent.worktree.workspace import WorkspaceError, open_repository

ON_FINISH_TIMEOUT_S = 600


def execute(night: NightConfig, *, view: RunView, resume: str | None = None, options: PlanOptions | None = None) -> int:
    """`options`: a named night's (`night --plan`, `--only failed`, `--retry discarded`)."""
    if night.name is not None:  # before anything is created
        try:
            with build_scratch(prefix=HOOKS_SCRATCH_PREFIX) as hooks:
                refuse_a_second_night_file(night, hooks)
        except NightError as error:
            view.error(str(error))
            return EXIT_USAGE
    with stop_signals():
        try:
            if options is not None and options.plan_only:
                return _print_plan(night, options, view)
            return _execute(night, view=view, resume=resume, options=options or PlanOptions())
        except Interrupted as stop:  # before the run started, or after it ended: nothing of it to settle
            view.error(f"{stop}")
            return stop.exit_code


def _print_plan(night: NightConfig, options: PlanOptions, view: RunView) -> int:
    """`night --plan`: the decisions, with no lock taken and nothing written (it works while a night runs)."""
    try:
        repos = {path: open_repository(path) for path in night.repositories()}
        with build_scratch(prefix=HOOKS_SCRATCH_PREFIX) as hooks:
            planned = plan_night(night, repos, "plan", hooks_dir=hooks, options=options, log=view.log)
    except (WorkspaceError, NightError) as error:
        view.error(str(error))
        return EXIT_USAGE
    for line in plan_lines(planned.plan, planning_only=True):
        view.log(line)
    return 0


def _execute(night: NightConfig, *, view: RunView, resume: str | None, options: PlanOptions) -> int:
    try:
        prepared = preflight(night, sandboxes=docker_sandboxes(), allow_dirty=night.allow_dirty, log=view.log)
    except PreflightError as error:
        view.error(str(error))
        return EXIT_USAGE
    run_id = resume or new_run_id(night.runs_dir)
    locks = [RepoLock(Path(repo.common_dir).resolve(), run_id) for repo in prepared.repos.values()]
    try:
        for lock, path in zip(locks, prepared.repos, strict=True):
            lock.acquire(path, view.log)
        # Owned and swept like a build's scratch: a kill -9 leaves it to the next run, never for good.
        with build_scratch(prefix=HOOKS_SCRATCH_PREFIX) as hooks:
            return _locked(night, prepared, run_id, view=view, resume=resume is not None, tonight=(options, hooks))
    except LockHeld as held:
        view.error(str(held))
        return EXIT_USAGE
    finally:
        for lock in locks:
            lock.release()


def _locked(
    night: NightConfig,
    prepared: Prepared,
    run_id: str,
    *,
    view: RunView,
    resume: bool,
    tonight: tuple[PlanOptions, Path],
) -> int:
    swept = prepared.sandboxes.sweep() if prepared.sandboxes is not None else 0
    if swept:
        view.log(f"removed {counted(swept, 'sandbox container')} left behind by earlier runs that did not finish")
    runs, builds = sweep_all_scratch()
    if runs:
        view.log(
            f"removed the worktrees of {counted(runs, 'earlier run')} that did not finish (their branches are kept)"
        )
    if builds:
        view.log(f"removed the scratch directories of {counted(builds, 'environment build')} that did not finish")
    servers: dict[str, object] = {"server_url": prepared.server_url}
    if prepared.fleet is not None:  # the servers that answered; the run's record names only those
        servers["servers"] = prepared.fleet
    server = {"llm": night.repos[0].llm.model_copy(update=servers)}
    night = night.model_copy(update={"repos": [config.model_copy(update=server) for config in night.repos]})
    journal = RunJournal(night.runs_dir, run_id, resume=resume)
    remember(prepared.repos, night.runs_dir)  # `review` in any of these repositories finds this run
    view.divert_to(journal.directory / OUTPUT_LOG)
    plan = planned = None
    if night.name is not None:
        try:
            plan, planned = _planned(
                night, prepared, journal, view=view, resume=resume, options=tonight[0], hooks=tonight[1]
            )
        except NightError as error:
            view.error(str(error))
            return EXIT_USAGE
        if planned is None:
            summary = _nothing_to_run(night, prepared, journal)
            _night_end(night, prepared, journal, summary, plan, view=view, hooks=tonight[1])
            # The same end as a night that ran: where its report is, what to review, the user's notification.
            _print_summary(view, summary, journal, headline=f"run {summary.run_id}: nothing to run tonight")
            if night.on_finish:
                _on_finish(night.on_finish, journal, summary, view)
            return summary.exit_code
        night = planned.night
    progress = previous = None
    if resume:
        progress = read_progress(journal.directory / "transcript.jsonl")
        previous = RunSummary.model_validate_json((journal.directory / "summary.json").read_bytes())
        view.log(f"resuming run {run_id}: {counted(len(progress.finished), 'task')} finished earlier, not redone")
    else:
        journal.write_config(night.repos[0])
        journal.write_json(NIGHT_RECORD, night)
    run = build_run(
        night,
        dispatch=task_dispatch(night),
        repos=prepared.repos,
        sandboxes=prepared.sandboxes,
        server_url=prepared.server_url,
        journal=journal,
        observe=view.handle,
        progress=progress,
        previous=previous,
        tonight=planned,
    )
    try:
        with view:
            summary = run.execute()
    finally:
        journal.close()
    _print_summary(view, summary, journal)
    _night_end(night, prepared, journal, summary, plan, view=view, hooks=tonight[1])
    if night.on_finish:
        _on_finish(night.on_finish, journal, summary, view)
    return summary.exit_code


def _night_end(
    night: NightConfig,
    prepared: Prepared,
    journal: RunJournal,
    summary: RunSummary,
    plan: NightPlan | None,
    *,
    view: RunView,
    hooks: Path,
) -> None:
    """A named night's summary and report gain what became of its tasks since last night (from the task records,
    now that every result is published) and what its gc removed."""
    if plan is None:
        return
    summary.fates = night_fates(plan, night.runs_dir, prepared.repos, hooks, view.log)
    summary.removed = _collect_garbage(night, prepared, view)
    journal.write_summary(summary)


def _collect_garbage(night: NightConfig, prepared: Prepared, view: RunView) -> list[str]:
    """A named night's end: what grows every night cut to its bounds (`gc = "off"`: not), one line per thing
    removed (returned for the report); what is kept is `refactor-agent gc`'s to say."""
    if not night.retention.after_night:
        return []
    stores = Stores(
        runs_dir=night.runs_dir,
        prefix_dir=default_kv_cache_dir(),
        repos=tuple(night.repositories()),
        images=prepared.sandboxes,
    )
    collection = collect_garbage(night.retention, stores, dry_run=False)
    if not collection.removed:
        return []
    collection.kept = []
    lines = collection_lines(collection)
    for line in lines:
        view.log(line)
    return lines


def _planned(
    night: NightConfig,
    prepared: Prepared,
    journal: RunJournal,
    *,
    view: RunView,
    resume: bool,
    options: PlanOptions,
    hooks: Path,
) -> tuple[NightPlan, Tonight | None]:
    """A named night's plan and its tasks: planned now (under the repository locks; the plan is printed and written
    before anything runs), or, resumed, as its plan.json says (a night is never planned twice). None: nothing to
    run."""
    if resume:
        plan = NightPlan.model_validate_json((journal.directory / PLAN_RECORD).read_bytes())
        return plan, Tonight(plan, night, prepared.repos, hooks, view.log)
    supersede(night.runs_dir, str(night.name), journal.run_id, prepared.repos, hooks, view.log)
    planned = plan_night(night, prepared.repos, journal.run_id, hooks_dir=hooks, options=options, log=view.log)
    for line in plan_lines(planned.plan, planning_only=False):
        view.log(line)
    journal.write_json(PLAN_RECORD, planned.plan)
    commit_plan(planned)
    claim(planned.stores, night, view.log)
    if planned.night is None:
        return planned.plan, None
    return planned.plan, Tonight(planned.plan, planned.night, prepared.repos, hooks, view.log)


def _nothing_to_run(night: NightConfig, prepared: Prepared, journal: RunJournal) -> RunSummary:
    """A night whose every task is kept, retired or skipped: its record and report say so, no model is asked."""
    journal.write_json(NIGHT_RECORD, night)
    repositories = [str(path) for path in night.repositories()]
    summary = RunSummary(
        run_id=journal.run_id,
        repo=repositories[0],
        repos=repositories,
        model=night.repos[0].llm.model,
        server_url=prepared.server_url,
        status="completed",
        ended_at=now_iso(),
    )
    journal.write_summary(summary)
    journal.close()
    return summary


def _on_finish(command: str, journal: RunJournal, summary: RunSummary, view: RunView) -> None:
    """The user's own command (from their night file or command line, not the model's), for a notification."""
    environment = {
        **os.environ,
        "REFACTOR_AGENT_REPORT": str((journal.directory / "report.md").absolute()),
        "REFACTOR_AGENT_RUN_DIR": str(journal.directory.absolute()),
        "REFACTOR_AGENT_RUN_ID": summary.run_id,
        "REFACTOR_AGENT_EXIT_CODE": str(summary.exit_code),
    }
    try:
        done = subprocess.run(
            command, shell=True, env=environment, stdin=subprocess.DEVNULL, timeout=ON_FINISH_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        view.log(f"warning: --on-finish {command!r}: {error}")
        return
    if done.returncode != 0:
        view.log(f"warning: --on-finish {command!r} exited {done.returncode}")


def task_dispatch(night: NightConfig) -> TaskDispatch:
    """Where the tasks run: Ray's nodes, or this machine (over a fleet of servers and their slots, or one by one).
    Ray itself loads only when its dispatch runs (an optional extra)."""
    return RayDispatch(night.ray_address) if night.executor == "ray" else local_dispatch(night)


def _print_summary(view: RunView, summary: RunSummary, journal: RunJournal, *, headline: str | None = None) -> None:
    """The end block: what the run proved (the embedded model's first run) or its tally (or `headline`), where its
    report is, and the command that reviews it. Each task's end line came as it happened."""
    if summary.interrupted_by:
        view.log(
            f"run interrupted by {summary.interrupted_by}: the task in flight kept its changes in patch.diff "
            "and, if it had any, in a commit marked interrupted on its branch"
        )
    for warning in summary.warnings:
        view.log(f"warning: {warning}")
    if summary.error is not None:
        view.error(f"run failed: {summary.error}")
    if headline is not None:
        view.log(headline)
    elif is_embedded(summary.served_model):  # the first run proves the install; SmolLM2 refactors nothing real
        view.log(view.proof.line())
    else:
        view.log(f"run {summary.run_id}: {verdict_counts(summary)}")
    view.log(f"report: {(journal.directory / 'report.html').absolute().as_uri()}")
    view.log(f"next: {review_command(summary.run_id, journal.directory.parent)}")


def review_command(run_id: str, runs_dir: Path) -> str:
    """`refactor-agent review RUN`, with --runs-dir when `review` run from here would not find the run."""
    found = runs_dir_to_read(None, run_id).absolute() == runs_dir.absolute()
    return f"refactor-agent review {run_id}" + ("" if found else f" --runs-dir {shlex.quote(str(runs_dir.absolute()))}")
