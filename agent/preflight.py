"""Checks before anything is created: each failure is one line and exit code 2, and nothing is touched."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import docker
import git

from agent.config import RunConfig
from agent.llama_api import ServerError
from agent.server import ensure_server
from agent.workspace import WorkspaceError, dirty_description, open_repository
from sandbox import SandboxError, docker_client, require_image


class PreflightError(Exception):
    """str() is the one line the user sees."""


@dataclass
class Prepared:
    repo: git.Repo
    docker: docker.DockerClient | None  # None on the head of a Ray run: Docker is the worker nodes' business
    server_url: str


def preflight(config: RunConfig, *, allow_dirty: bool, log: Callable[[str], None]) -> Prepared:
    try:
        repo = open_repository(config.repo)
    except WorkspaceError as error:
        raise PreflightError(str(error)) from None
    dirty = dirty_description(repo)
    if dirty and not allow_dirty:
        raise PreflightError(
            f"{config.repo} has uncommitted changes ({dirty}) that the run would not see: it works from HEAD. "
            "Commit or stash them, or pass --allow-dirty"
        )
    if dirty:
        log(f"note: {config.repo} has uncommitted changes ({dirty}); the run works from HEAD and leaves them alone")
    if config.executor == "ray":  # the workers check Docker, the image and their servers (agent/ray_executor.py)
        if importlib.util.find_spec("ray") is None:
            raise PreflightError("--executor ray: Ray is not installed here: pip install 'refactor-agent[ray]'")
        return Prepared(repo=repo, docker=None, server_url=config.llm.server_url)
    try:
        client = docker_client()
        require_image(client, config.image)
    except SandboxError as error:
        raise PreflightError(str(error)) from None
    try:
        server_url = ensure_server(config.llm, log=log)
        for other in config.llm.fleet[1:]:  # a fleet's servers are the user's own: each must answer
            ensure_server(config.llm.model_copy(update={"server_url": other, "server_explicit": True}), log=log)
    except ServerError as error:
        raise PreflightError(str(error)) from None
    return Prepared(repo=repo, docker=client, server_url=server_url)
