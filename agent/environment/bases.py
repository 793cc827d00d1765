"""Which images a devcontainer may build on: the sandbox image or one on the user's `allowed_base_images`, and only
when it is on this machine. A repository never chooses on its own: any local image would do otherwise (another
repository's environment image, with what that build left in it), and a missing one makes the daemon pull it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from docker.utils import parse_repository_tag

DOCKER_HUB_PREFIXES = ("docker.io/library/", "docker.io/", "index.docker.io/library/", "index.docker.io/")


def normalise(reference: str) -> str:
    """One spelling per image: `python`, `library/python:latest` and `docker.io/library/python:latest` are one."""
    name = reference.strip().lower()
    for prefix in DOCKER_HUB_PREFIXES:
        if name.startswith(prefix):
            name = name.removeprefix(prefix)
            break
    name = name.removeprefix("library/")
    if "@" in name:  # pinned by digest: that is its one spelling
        return name
    repository, tag = parse_repository_tag(name)
    return f"{repository}:{tag or 'latest'}"


@dataclass(frozen=True)
class BaseImages:
    """The allowed images (the sandbox image, the user's list) and how to tell whether one is on this machine."""

    sandbox_image: str
    allowed: frozenset[str]
    present: Callable[[str], bool]

    @classmethod
    def of(cls, sandbox_image: str, allowed: Iterable[str], present: Callable[[str], bool]) -> BaseImages:
        return cls(sandbox_image, frozenset(normalise(image) for image in [sandbox_image, *allowed]), present)

    def refusal(self, image: str) -> str | None:
        """Why `image` may not be built on (one line), or None when it may."""
        if normalise(image) not in self.allowed:
            return (
                f"base image {image} is neither the sandbox image ({self.sandbox_image}) nor in your "
                "allowed_base_images"
            )
        if not self.present(image):
            return f"base image {image} is not on this machine (no registry is used)"
        return None
