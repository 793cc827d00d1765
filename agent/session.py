"""Wires a run together: preflight, journal, model, view; returns the process exit code."""

from __future__ import annotations

from typing import Any

from agent.config import RunConfig
from agent.journal import RunJournal, new_run_id
from agent.live import RunView
from agent.llm import OpenAIChatModel
from agent.preflight import PreflightError, preflight
from agent.report import RunSummary
from agent.runner import Run
from sandbox import sweep_leftovers

EXIT_PREFLIGHT = 2


def execute(config: RunConfig, *, allow_dirty: bool, view: RunView) -> int:
    try:
        prepared = preflight(config, allow_dirty=allow_dirty, log=view.log)
    except PreflightError as error:
        view.error(str(error))
        return EXIT_PREFLIGHT
    swept = sweep_leftovers(prepared.docker)
    if swept:
        view.log(f"removed {swept} sandbox container(s) left behind by earlier runs that did not finish")
    config = config.model_copy(update={"llm": config.llm.model_copy(update={"server_url": prepared.server_url})})
    journal = RunJournal(config.runs_dir, new_run_id())
    journal.write_config(config)
    run: Run | None = None

    def on_event(event: dict[str, Any]) -> None:
        if run is not None:
            run.emit(event)

    model = OpenAIChatModel(
        config.llm, on_retry=lambda message: on_event({"type": "retry", "message": message}), on_progress=on_event
    )
    run = Run(
        config,
        repo=prepared.repo,
        docker_client=prepared.docker,
        model=model,
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


def _print_summary(view: RunView, summary: RunSummary, journal: RunJournal) -> None:
    if view.live:  # plain output already logged each task's end as it happened
        for task in summary.tasks:
            where = f" on {task.branch} ({task.commit[:12]})" if task.commit else ""
            view.log(f"task {task.index} {task.status}{where}: {task.reason}")
    for warning in summary.warnings:
        view.log(f"warning: {warning}")
    view.log(f"run {summary.run_id}: {journal.directory}")
