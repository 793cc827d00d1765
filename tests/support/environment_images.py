"""Environment images that a test builds under a repository name of its own, removed after it."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator

import docker

from agent.environment.plan import ENV_REPOSITORY


@contextlib.contextmanager
def own_repository_name(prefix: str) -> Iterator[str]:
    """A repository name nobody else uses: its images are built here, whatever earlier sessions left, and every
    image tagged for it is removed at the end."""
    name = f"{prefix}-{secrets.token_hex(4)}"
    yield name
    client = docker.from_env()
    for image in client.images.list(name=ENV_REPOSITORY):
        for tag in image.tags:
            if tag.startswith(f"{ENV_REPOSITORY}:{name}"):
                client.images.remove(tag, force=True)
