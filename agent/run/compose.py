"""The one composer of a Run: its model (llama-server's chat client, whose retries and prefill progress become the
run's events) and every collaborator handed in. The command, a Ray worker and the tests build runs here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import docker
import git

from agent.protocol.config import NightConfig
from agent.protocol.events import Event, Retry
from agent.protocol.records import RunSummary
from agent.record.journal import RunJournal
from agent.record.progress import RunProgress
from agent.run.run import Run, TaskDispatch
from agent.server.chat import OpenAIChatModel


def build_run(
    night: NightConfig,
    *,
    repos: dict[Path, git.Repo],
    docker_client: docker.DockerClient | None,
    server_url: str,
    journal: RunJournal,
    observe: Callable[[Event], None],
    dispatch: TaskDispatch,
    progress: RunProgress | None = None,
    previous: RunSummary | None = None,
    slot: int = 0,
) -> Run:
    """The run with its model, whose retries and prefill progress become the run's events, and the dispatch it is
    given (the command chooses it; a Ray worker its node's own). slot: the server slot its tasks are pinned to (a
    Ray task's process takes one of its node server's slots)."""
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
        dispatch=dispatch,
        slot=slot,
    )
    return run
