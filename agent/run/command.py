"""Wires a run together: preflight, repository locks, journal, model, view, --on-finish; returns the exit code."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import docker
import git

from agent.commands import EXIT_USAGE
from agent.protocol.config import NightConfig
from agent.protocol.events import Event, Retry
from agent.protocol.records import RunSummary
from agent.record.journal import RunJournal, new_run_id, run_directories
from agent.record.live import RunView
from agent.record.progress import RunProgress, read_progress
from agent.run.interrupt import Interrupted, stop_signals
from agent.run.lock import LockHeld, RepoLock
from agent.run.preflight import PreflightError, Prepared, preflight
from agent.run.run import InOrder, Run, TaskDispatch
from agent.server.chat import OpenAIChatModel
from agent.worktree.leftovers import BUILD_SCRATCH_PREFIX, sweep_run_scratch
from sandbox import sweep_leftovers

OUTPUT_LOG = "output.log"
NIGHT_RECORD = "night.json"  # the night's settings, which `resume` runs again
ON_FINISH_TIMEOUT_S = 600
# Runs a resume may continue: killed while running (the summary still says so), stopped by a signal, or failed
# outside its tasks (the fault mended since).
RESUMABLE = ("running", "interrupted", "failed")


class ResumeError(Exception):
    """str() is the one line the user sees."""


def load_run_night(run_dir: Path) -> NightConfig:
    """The settings of the run in `run_dir`, for resume."""
    try:
        night = NightConfig.model_validate_json((run_dir / NIGHT_RECORD).read_bytes())
        summary = RunSummary.model_validate_json((run_dir / "summary.json").read_bytes())
    except FileNotFoundError as error:
        raise ResumeError(f"{run_dir}: not a run directory ({Path(str(error.filename)).name} is missing)") from None
    except ValueError as error:
        raise ResumeError(f"{run_dir}: its record is unreadable: {error.__class__.__name__}") from None
    unfinished = summary.status == "running" or len(summary.tasks) < len(night.tasks())
    if summary.status not in RESUMABLE or not unfinished:
        raise ResumeError(f"run {run_dir.name} is {summary.status}: nothing to resume")
    return night


def _work(night: NightConfig) -> list[tuple[Path, str]]:
    return [(config.repo, task) for config, task in night.tasks()]


def unfinished_run(night: NightConfig) -> str | None:
    """The newest run of the same night file (or the same repositories and tasks) that can be resumed."""
    for run_dir in reversed(run_directories(night.runs_dir)):
        try:
            earlier = load_run_night(run_dir)
        except ResumeError:
            continue
        same = (
            earlier.night_file == night.night_file
            if night.night_file is not None
            else earlier.night_file is None and _work(earlier) == _work(night)
        )
        if same:
            return run_dir.name
    return None


def execute(night: NightConfig, *, view: RunView, resume: str | None = None) -> int:
    with stop_signals():
        try:
            return _execute(night, view=view, resume=resume)
        except Interrupted as stop:  # before the run started, or after it ended: nothing of it to settle
            view.error(f"{stop}")
            return stop.exit_code


def _execute(night: NightConfig, *, view: RunView, resume: str | None) -> int:
    try:
        prepared = preflight(night, allow_dirty=night.allow_dirty, log=view.log)
    except PreflightError as error:
        view.error(str(error))
        return EXIT_USAGE
    run_id = resume or new_run_id()
    locks = [RepoLock(Path(repo.common_dir).resolve(), run_id) for repo in prepared.repos.values()]
    try:
        for lock, path in zip(locks, prepared.repos, strict=True):
            lock.acquire(path, view.log)
        return _locked(night, prepared, run_id, view=view, resume=resume is not None)
    except LockHeld as held:
        view.error(str(held))
        return EXIT_USAGE
    finally:
        for lock in locks:
            lock.release()


def _locked(night: NightConfig, prepared: Prepared, run_id: str, *, view: RunView, resume: bool) -> int:
    swept = sweep_leftovers(prepared.docker) if prepared.docker is not None else 0
    if swept:
        view.log(f"removed {swept} sandbox container(s) left behind by earlier runs that did not finish")
    swept = sweep_run_scratch()
    if swept:
        view.log(f"removed the worktrees of {swept} earlier run(s) that did not finish (their branches are kept)")
    swept = sweep_run_scratch(prefix=BUILD_SCRATCH_PREFIX)
    if swept:
        view.log(f"removed the scratch directories of {swept} environment build(s) that did not finish")
    servers: dict[str, object] = {"server_url": prepared.server_url}
    if prepared.fleet is not None:  # the servers that answered; the run's record names only those
        servers["servers"] = prepared.fleet
    server = {"llm": night.repos[0].llm.model_copy(update=servers)}
    night = night.model_copy(update={"repos": [config.model_copy(update=server) for config in night.repos]})
    journal = RunJournal(night.runs_dir, run_id, resume=resume)
    view.divert_to(journal.directory / OUTPUT_LOG)
    progress = previous = None
    if resume:
        progress = read_progress(journal.directory / "transcript.jsonl")
        previous = RunSummary.model_validate_json((journal.directory / "summary.json").read_bytes())
        view.log(f"resuming run {run_id}: {len(progress.finished)} task(s) finished earlier are not redone")
    else:
        journal.write_config(night.repos[0])
        journal.write_json(NIGHT_RECORD, night)
    run = build_run(
        night,
        repos=prepared.repos,
        docker_client=prepared.docker,
        server_url=prepared.server_url,
        journal=journal,
        observe=view.handle,
        progress=progress,
        previous=previous,
    )
    try:
        with view:
            summary = run.execute()
    finally:
        journal.close()
    _print_summary(view, summary, journal)
    if night.on_finish:
        _on_finish(night.on_finish, journal, summary, view)
    return summary.exit_code


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


def build_run(
    night: NightConfig,
    *,
    repos: dict[Path, git.Repo],
    docker_client: docker.DockerClient | None,
    server_url: str,
    journal: RunJournal,
    observe: Callable[[Event], None],
    progress: RunProgress | None = None,
    previous: RunSummary | None = None,
    slot: int = 0,
) -> Run:
    """The run with its model, whose retries and prefill progress become the run's events, and its dispatch.
    slot: the server slot its tasks are pinned to (a Ray task's process takes one of its node server's slots)."""
    run: Run | None = None

    def on_event(event: Event) -> None:
        if run is not None:
            run.emit(event)

    llm = night.repos[0].llm
    # Pinned to the slot whose KV cache the run saves and restores (agent/server/kv_cache.py).
    model = OpenAIChatModel(
        llm, on_retry=lambda message: on_event(Retry(message=message)), on_progress=on_event, slot=slot
    )
    run = Run(
        night,
        repos=repos,
        docker_client=docker_client,
        model=model,
        server_url=server_url,
        journal=journal,
        observe=observe,
        progress=progress,
        previous=previous,
        dispatch=task_dispatch(night),
        slot=slot,
    )
    return run


def task_dispatch(night: NightConfig) -> TaskDispatch:
    """Where the tasks run: Ray's nodes, this machine over a fleet of servers and their slots (--parallel), or
    this machine one by one. Ray and the fleet load only when asked for."""
    if night.executor == "ray":
        from agent.dispatch.ray_head import RayDispatch

        return RayDispatch(night.ray_address)
    llm = night.repos[0].llm  # the night's servers are night-wide settings
    if len(llm.fleet) > 1 or night.parallel > 1:
        from agent.dispatch.fleet import FleetDispatch
        from agent.dispatch.seats import ServerPool

        return FleetDispatch(llm, ServerPool(llm.fleet, slots_per_server=night.parallel))
    return InOrder()


def _print_summary(view: RunView, summary: RunSummary, journal: RunJournal) -> None:
    if view.live:  # plain output already logged each task's end as it happened
        for task in summary.tasks:
            where = f" on {task.branch} ({task.commit[:12]})" if task.commit else ""
            view.log(f"task {task.index} {task.status}{where}: {task.reason}")
    if summary.interrupted_by:
        view.log(
            f"run interrupted by {summary.interrupted_by}: the task in flight kept its changes in patch.diff "
            "and, if it had any, in a commit marked interrupted on its branch"
        )
    for warning in summary.warnings:
        view.log(f"warning: {warning}")
    if summary.error is not None:
        view.error(f"run failed: {summary.error}")
    view.log(f"run {summary.run_id}: {journal.directory}")
