"""Wires a run together: preflight, journal, model, view; returns the process exit code."""

from __future__ import annotations

from collections.abc import Callable

import docker
import git

from agent.config import RunConfig
from agent.events import Event, Retry
from agent.interrupt import Interrupted, stop_signals
from agent.journal import RunJournal, new_run_id
from agent.leftovers import sweep_run_scratch
from agent.live import RunView
from agent.llm import OpenAIChatModel
from agent.preflight import PreflightError, preflight
from agent.report import RunSummary
from agent.runner import InOrder, Run, TaskDispatch
from sandbox import sweep_leftovers

EXIT_PREFLIGHT = 2
OUTPUT_LOG = "output.log"


def execute(config: RunConfig, *, allow_dirty: bool, view: RunView) -> int:
    with stop_signals():
        try:
            return _execute(config, allow_dirty=allow_dirty, view=view)
        except Interrupted as stop:  # before the run started, or after it ended: nothing of it to settle
            view.error(f"{stop}")
            return stop.exit_code


def _execute(config: RunConfig, *, allow_dirty: bool, view: RunView) -> int:
    try:
        prepared = preflight(config, allow_dirty=allow_dirty, log=view.log)
    except PreflightError as error:
        view.error(str(error))
        return EXIT_PREFLIGHT
    swept = sweep_leftovers(prepared.docker) if prepared.docker is not None else 0
    if swept:
        view.log(f"removed {swept} sandbox container(s) left behind by earlier runs that did not finish")
    swept = sweep_run_scratch()
    if swept:
        view.log(f"removed the worktrees of {swept} earlier run(s) that did not finish (their branches are kept)")
    config = config.model_copy(update={"llm": config.llm.model_copy(update={"server_url": prepared.server_url})})
    journal = RunJournal(config.runs_dir, new_run_id())
    view.divert_to(journal.directory / OUTPUT_LOG)
    journal.write_config(config)
    run = build_run(
        config,
        repo=prepared.repo,
        docker_client=prepared.docker,
        server_url=prepared.server_url,
        journal=journal,
        observe=view.handle,
    )
    try:
        with view:
            summary = run.execute()
    finally:
        journal.close()
    _print_summary(view, summary, journal)
    return summary.exit_code


def build_run(
    config: RunConfig,
    *,
    repo: git.Repo,
    docker_client: docker.DockerClient | None,
    server_url: str,
    journal: RunJournal,
    observe: Callable[[Event], None],
) -> Run:
    """The run with its model, whose retries and prefill progress become the run's events, and its dispatch."""
    run: Run | None = None

    def on_event(event: Event) -> None:
        if run is not None:
            run.emit(event)

    model = OpenAIChatModel(config.llm, on_retry=lambda message: on_event(Retry(message=message)), on_progress=on_event)
    run = Run(
        config,
        repo=repo,
        docker_client=docker_client,
        model=model,
        server_url=server_url,
        journal=journal,
        observe=observe,
        dispatch=task_dispatch(config),
    )
    return run


def task_dispatch(config: RunConfig) -> TaskDispatch:
    """Where the tasks run: Ray's nodes, this machine over a fleet of servers, or this machine one by one. Ray
    and the fleet load only when asked for."""
    if config.executor == "ray":
        from agent.ray_executor import RayDispatch

        return RayDispatch(config.ray_address)
    if len(config.llm.fleet) > 1:
        from agent.fleet_dispatch import FleetDispatch

        return FleetDispatch(config.llm)
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
    view.log(f"run {summary.run_id}: {journal.directory}")
