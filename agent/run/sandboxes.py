"""Where a run's tasks run their commands: the narrow protocol the run sees (Sandboxes), and its implementation on
the Docker daemon, one container per task with no network. The composer hands a run its Sandboxes; tests hand it
one that runs commands in the worktree instead (tests/support/local_sandbox.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

import docker
import git

from agent.environment.build import prune_images
from agent.environment.stage import prepare_environment
from agent.gate.baseline import image_identity
from agent.protocol.config import RunConfig
from agent.protocol.records import EnvironmentRecord
from sandbox import DockerSandbox, SandboxLimits, docker_client, remove_run_containers, require_image, sweep_leftovers
from tools.base import Executor


class Sandboxes(Protocol):
    """A run's sandboxes: checked before the run, its environment per repository, one sandbox per task."""

    def preflight(self, images: Iterable[str]) -> None:
        """Ready to run tasks on each of `images`; else raise SandboxError (its str() is the one line)."""
        ...

    def sweep(self) -> int:
        """Remove what earlier runs that did not finish left behind; how many."""
        ...

    def environment(
        self,
        repo: git.Repo,
        config: RunConfig,
        *,
        log_path: Path,
        progress: Callable[[str], None],
        deadline: float | None,
        revision: str = "HEAD",
    ) -> EnvironmentRecord:
        """The repository's environment at `revision` (its committed tree), reused or built (never raises for a build
        that fails)."""
        ...

    def identity(self, image: str) -> str:
        """What the image is (a rebuilt one under the same tag is another), for the baseline cache's key."""
        ...

    def open(
        self, image: str, workspace: Path, *, run_id: str, limits: SandboxLimits, read_only_paths: Sequence[Path]
    ) -> AbstractContextManager[Executor]:
        """One task's sandbox over its worktree, gone when the block is left."""
        ...

    def remove_run(self, run_id: str) -> None:
        """Every sandbox of the run, now (a stop signal)."""
        ...

    def prune_images(self, keep: int, *, repositories: set[str], dry_run: bool) -> tuple[list[str], dict[str, str]]:
        """The environment images of `repositories` beyond the newest `keep` of each, removed (or, dry_run, only
        named); those kept with why. Raises SandboxError when there is no daemon to ask."""
        ...


class DockerSandboxes:
    """The sandboxes on the Docker daemon; the client is made at the first use (`pack` and `--help` never need
    it), so that a missing daemon is the preflight's one line."""

    def __init__(self, client: docker.DockerClient | None = None) -> None:
        self._client = client

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = docker_client()
        return self._client

    def preflight(self, images: Iterable[str]) -> None:
        for image in dict.fromkeys(images):
            require_image(self.client, image)

    def sweep(self) -> int:
        return sweep_leftovers(self.client)

    def environment(
        self,
        repo: git.Repo,
        config: RunConfig,
        *,
        log_path: Path,
        progress: Callable[[str], None],
        deadline: float | None,
        revision: str = "HEAD",
    ) -> EnvironmentRecord:
        return prepare_environment(
            repo,
            client=self.client,
            sandbox_image=config.image,
            image_explicit=config.image_explicit,
            spec=config.environment,
            test_command=config.test_cmd,
            log_path=log_path,
            progress=progress,
            allowed_base_images=config.allowed_base_images,
            deadline=deadline,
            revision=revision,
        )

    def identity(self, image: str) -> str:
        return image_identity(self.client, image)

    def open(
        self, image: str, workspace: Path, *, run_id: str, limits: SandboxLimits, read_only_paths: Sequence[Path]
    ) -> AbstractContextManager[Executor]:
        return DockerSandbox(
            image, workspace, run_id=run_id, limits=limits, client=self.client, read_only_paths=read_only_paths
        )

    def remove_run(self, run_id: str) -> None:
        remove_run_containers(self.client, run_id)

    def prune_images(self, keep: int, *, repositories: set[str], dry_run: bool) -> tuple[list[str], dict[str, str]]:
        return prune_images(self.client, keep, repositories=repositories, dry_run=dry_run)


def docker_sandboxes() -> Sandboxes:
    """The sandboxes a run uses (tests of the run's pipeline replace this one function)."""
    return DockerSandboxes()
