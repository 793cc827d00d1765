"""The one composer of a Run: it builds every collaborator the run works with and hands it in: the model
(llama-server's chat client unless one is given, its retries and prefill progress the run's events), the server's
API, saved prefixes and counters, the sandboxes, the dispatch. The command, a Ray worker, `eval` and the tests
build their runs here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import git
import httpx

from agent.nights.tonight import NightTasks
from agent.protocol.config import NightConfig, RunConfig
from agent.protocol.events import Event, Retry
from agent.protocol.model import ChatModel
from agent.protocol.records import RunSummary
from agent.record.journal import RunJournal
from agent.record.progress import RunProgress
from agent.run.run import Run, RunServer, TaskDispatch
from agent.run.sandboxes import Sandboxes
from agent.server.api import LlamaServerAPI, ServerError, served_model
from agent.server.chat import OpenAIChatModel
from agent.server.kv_cache import PrefixCache
from agent.server.metrics import SpeculationProbe


def build_run(
    night: NightConfig | RunConfig,
    *,
    repos: dict[Path, git.Repo],
    sandboxes: Sandboxes | None,
    server_url: str | None,
    journal: RunJournal,
    observe: Callable[[Event], None],
    dispatch: TaskDispatch,
    model: ChatModel | None = None,
    progress: RunProgress | None = None,
    previous: RunSummary | None = None,
    slot: int = 0,
    tonight: NightTasks | None = None,
) -> Run:
    """A run with the dispatch it is given (the command chooses it; a Ray worker its node's own). model: None for
    llama-server's chat client on `server_url`; a scripted one otherwise (eval's, the tests'). server_url None: no
    server at all (a scripted model, tokens estimated). slot: the server slot its tasks are pinned to (a Ray task's
    process takes one of its node server's slots), whose saved prefixes the run manages."""
    run: Run | None = None

    def on_event(event: Event) -> None:  # the run's events, once it exists (the model and cache come first)
        if run is not None:
            run.emit(event)

    settings = night if isinstance(night, RunConfig) else night.repos[0]
    if model is None:
        # Pinned to the slot whose KV cache the run saves and restores (agent/server/kv_cache.py).
        model = OpenAIChatModel(
            settings.llm, on_retry=lambda message: on_event(Retry(message=message)), on_progress=on_event, slot=slot
        )
    server = None
    if server_url is not None:
        api = LlamaServerAPI(server_url)
        # Saved prefixes: a task whose repository prefix was prefilled before (tonight or another night) restores it.
        cache = PrefixCache.for_server(api, settings=settings.llm.effort, notify=on_event)
        server = RunServer(
            url=server_url,
            api=api,
            prefix_cache=cache.for_slot(slot) if cache is not None and slot else cache,
            probe=SpeculationProbe(api),
        )
    fleet = settings.llm.fleet if server_url is not None else []
    run = Run(
        night,
        repos=repos,
        sandboxes=sandboxes,
        model=model,
        server=server,
        journal=journal,
        observe=observe,
        dispatch=dispatch,
        progress=progress,
        previous=previous,
        tonight=tonight,
        served={url: _served_model(url) for url in dict.fromkeys([*([server_url] if server_url else []), *fleet])},
    )
    return run


def _served_model(url: str) -> str | None:
    """What the server at `url` runs, from one /props; None when it does not say (the run goes on: it is a label)."""
    try:
        with LlamaServerAPI(url, timeout_s=10.0) as api:
            return served_model(api.props())
    except (ServerError, httpx.HTTPError, ValueError):
        return None
