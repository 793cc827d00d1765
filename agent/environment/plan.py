"""What an environment build does, decided on the host before anything runs: the plan, and its digest."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Literal

from pydantic import BaseModel

from agent.environment.indexes import IndexConfig

# Inside the images. The dependency files are copied (never mounted) so what installs next to them stays.
ENV_ROOT = "/opt/refactor-agent"
DEPS_DIR = f"{ENV_ROOT}/src"
# uv and the CA bundle, mounted read-only for the build only: nothing of them is left in the image.
TOOLS_DIR = "/run/refactor-agent"
UV = f"{TOOLS_DIR}/uv"
WHEELHOUSE_DIR = "/run/refactor-agent-wheelhouse"
ENV_REPOSITORY = "refactor-agent-env"
# Bump when what a plan means changes, so older images are no longer taken for current ones.
PLAN_VERSION = 2

Source = Literal["image", "devcontainer", "environment-file", "detected", "none"]


class SetupStep(BaseModel):
    name: str
    command: str
    workdir: str = DEPS_DIR


class DockerfileBase(BaseModel):
    """A devcontainer's own Dockerfile: built from the committed tree of its context directory."""

    context: str
    dockerfile: str  # relative to the context
    args: dict[str, str] = {}
    context_tree: str = ""  # git tree id: the digest follows every change under the context
    base_images: list[str] = []  # what its FROM and COPY --from name outside it: allowed, and on this machine


class EnvironmentPlan(BaseModel):
    source: Source
    description: str
    base_image: str | None = None
    dockerfile: DockerfileBase | None = None
    files: dict[str, bytes] = {}  # copied to DEPS_DIR
    # Written over the build's copy of the committed tree: the files that decide the dependencies, as the build
    # reads them (requirements files cleaned). Only they, never the rest of the tree, go into the digest.
    tree_files: dict[str, bytes] = {}
    steps: list[SetupStep] = []
    env: dict[str, str] = {}
    path_prepend: list[str] = []
    index: IndexConfig = IndexConfig()
    hosts: list[str] = []  # reachable in the build besides the package indexes (npm's registry, an apt mirror)
    # The steps run in a copy of the committed tree at /workspace (a devcontainer's lifecycle commands, Python
    # metadata built from the source); the copy is removed before the image is committed.
    needs_snapshot: bool = False
    # For the record, not the image: what the plan was made from, and what was found and not used, with why.
    used: list[str] = []
    skipped: list[str] = []

    @property
    def builds(self) -> bool:
        return self.source not in ("image", "none")

    def digest(self, base_image_id: str, uv_version: str) -> str:
        """Everything that decides the image's content; editing source files changes none of it."""
        material = {
            "version": PLAN_VERSION,
            "source": self.source,
            "base": base_image_id,
            "dockerfile": self.dockerfile.model_dump() if self.dockerfile else None,
            "files": {path: hashlib.sha256(data).hexdigest() for path, data in sorted(self.files.items())},
            "tree_files": {path: hashlib.sha256(data).hexdigest() for path, data in sorted(self.tree_files.items())},
            "steps": [step.model_dump() for step in self.steps],
            "env": self.env,
            "path": self.path_prepend,
            "uv": uv_version,
        }
        return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def repository_slug(name: str) -> str:
    """A repository name as a Docker tag allows it: lower case, [a-z0-9_.-], at most 60 characters."""
    slug = re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-.")
    return slug[:60] or "repository"


def image_tag(repository_name: str, digest: str) -> str:
    return f"{ENV_REPOSITORY}:{repository_slug(repository_name)}-{digest[:12]}"
