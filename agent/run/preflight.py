"""Checks before anything is created: each failure is one line and exit code 2, and nothing is touched."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import git

from agent.protocol.config import LLMConfig, NightConfig, RunConfig
from agent.run.sandboxes import Sandboxes
from agent.server.api import ServerError, ServerLoading, ServerUnreachable
from agent.server.ensure import ensure_server
from agent.worktree.workspace import WorkspaceError, dirty_description, open_repository
from sandbox import SandboxError


class PreflightError(Exception):
    """str() is the one line the user sees."""


@dataclass
class Prepared:
    repos: dict[Path, git.Repo]  # every repository of the night, by its path
    sandboxes: Sandboxes | None  # None on the head of a Ray run: Docker is the worker nodes' business
    server_url: str
    fleet: list[str] | None = None  # a fleet's servers that answered, server_url first (None: no fleet)

    @property
    def repo(self) -> git.Repo:
        return next(iter(self.repos.values()))


def _open(path: Path, *, allow_dirty: bool, log: Callable[[str], None]) -> git.Repo:
    try:
        repo = open_repository(path)
    except WorkspaceError as error:
        raise PreflightError(str(error)) from None
    dirty = dirty_description(repo)
    if dirty and not allow_dirty:
        raise PreflightError(
            f"{path} has uncommitted changes ({dirty}) that the run would not see: it works from HEAD. "
            "Commit or stash them, or pass --allow-dirty"
        )
    if dirty:
        log(f"note: {path} has uncommitted changes ({dirty}); the run works from HEAD and leaves them alone")
    return repo


def preflight(
    night: NightConfig | RunConfig, *, sandboxes: Sandboxes, allow_dirty: bool, log: Callable[[str], None]
) -> Prepared:
    """Every repository of the night, then the sandboxes (Docker) and each image, then the server: the first
    problem ends it."""
    configs = night.repos if isinstance(night, NightConfig) else [night]
    repos = {path: _open(path, allow_dirty=allow_dirty, log=log) for path in dict.fromkeys(c.repo for c in configs)}
    config = configs[0]
    if isinstance(night, NightConfig) and night.executor == "ray":  # the workers check Docker, images, servers
        if importlib.util.find_spec("ray") is None:
            raise PreflightError("--executor ray: Ray is not installed here: pip install 'refactor-agent[ray]'")
        return Prepared(repos=repos, sandboxes=None, server_url=config.llm.server_url)
    try:
        sandboxes.preflight(each.image for each in configs)
    except SandboxError as error:
        raise PreflightError(str(error)) from None
    slots = night.parallel if isinstance(night, NightConfig) else 1  # each server serves --parallel tasks at once
    try:
        if len(config.llm.fleet) > 1:
            fleet = _live_fleet(config.llm, log=log, slots=slots)
            return Prepared(repos=repos, sandboxes=sandboxes, server_url=fleet[0], fleet=fleet)
        server_url = ensure_server(config.llm, log=log, slots=slots)
    except ServerError as error:
        raise PreflightError(str(error)) from None
    return Prepared(repos=repos, sandboxes=sandboxes, server_url=server_url)


def _live_fleet(llm: LLMConfig, *, log: Callable[[str], None], slots: int) -> list[str]:
    """The fleet's servers that answer. One that does not (down, or still loading past the wait) is left out in
    one line, as the failover leaves out one that dies later; a server that answers wrongly (too few slots, not
    a llama-server) is a mistake in the settings and stops the run."""
    live, silent = [], []
    for url in llm.fleet:  # the user's own servers: none is replaced by the embedded one
        try:
            ensure_server(llm.model_copy(update={"server_url": url, "server_explicit": True}), log=log, slots=slots)
            live.append(url)
        except (ServerUnreachable, ServerLoading) as error:
            silent.append((url, "is still loading" if isinstance(error, ServerLoading) else "does not answer"))
    if not live:
        raise PreflightError(
            f"no server of the fleet answers ({', '.join(url for url, _ in silent)}): start them, or name others"
        )
    for url, why in silent:
        log(
            f"warning: {url} {why}: left out of the fleet for this run ({len(live)} of {len(llm.fleet)} servers answer)"
        )
    return live
