"""`.devcontainer/devcontainer.json`: the Dev Containers description many teams already keep.

Supported: `image`, or `build.dockerfile`/`context`/`args`; `containerEnv`; `onCreateCommand` and
`postCreateCommand`, run at build time in a copy of the committed tree at /workspace. Features are refused: they
are fetched from registries, which an air-gapped build cannot reach. The image, or every image the Dockerfile
builds on, must be allowed and on this machine (bases.py), and the Dockerfile must fetch nothing (dockerfile.py);
otherwise the devcontainer is not used, with the reason.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from agent.environment.bases import BaseImages
from agent.environment.committed import CommittedTree
from agent.environment.dockerfile import DockerfileError, base_images
from agent.environment.plan import DockerfileBase, SetupStep
from sandbox.container import WORKSPACE

LOCATIONS = (".devcontainer/devcontainer.json", ".devcontainer.json")
LIFECYCLE = ("onCreateCommand", "postCreateCommand")
# The repository's file is parsed on the host: a real one is a few KB, and the comment scan must stay cheap.
MAX_DEVCONTAINER_BYTES = 256 * 1024
# JSON with comments, one token at a time from left to right: strings first, so that `//` inside one is kept.
# No pattern can fail once started (an unterminated string or comment runs to the end), so nothing backtracks and
# the scan is linear in the text (the former search-and-replace took minutes on 128 KB of unterminated strings).
_JSONC_TOKENS = re.compile(
    r'(?P<string>"[^"\\]*(?:\\.[^"\\]*)*"?)'
    r"|(?P<comment>//[^\n]*|/\*[^*]*(?:\*+[^*/][^*]*)*(?:\*+/)?)"
    r"|(?P<comma>,)"
    r"|(?P<blank>\s+)"
    r'|(?P<other>[^",/\s]+|/)',
    re.DOTALL,
)

Command = str | list[str] | dict[str, str | list[str]]


class DevcontainerError(Exception):
    """str() is the one line the user sees."""


class BuildSection(BaseModel):
    model_config = ConfigDict(extra="ignore")
    dockerfile: str
    context: str = "."
    args: dict[str, str] = {}


class Devcontainer(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    image: str | None = None
    build: BuildSection | None = None
    features: dict[str, Any] = {}
    containerEnv: dict[str, str] = {}  # the spec's own names
    onCreateCommand: Command | None = None
    postCreateCommand: Command | None = None


def strip_jsonc(text: str) -> str:
    """Comments out, trailing commas out: what the Dev Containers spec allows beyond JSON."""
    pieces: list[str] = []
    pending_comma: int | None = None  # where a comma waits to learn whether `}` or `]` comes next
    for token in _JSONC_TOKENS.finditer(text):
        kind, value = token.lastgroup, token.group()
        if kind == "comment":
            pieces.append(" ")
            continue
        if kind != "blank" and pending_comma is not None:
            if kind == "other" and value[0] in "}]":
                pieces[pending_comma] = ""
            pending_comma = None
        if kind == "comma":
            pending_comma = len(pieces)
        pieces.append(value)
    return "".join(pieces)


def find_devcontainer(tree: CommittedTree) -> str | None:
    return next((path for path in LOCATIONS if tree.regular(path)), None)


def parse_devcontainer(text: str, path: str) -> Devcontainer:
    if len(text) > MAX_DEVCONTAINER_BYTES:
        raise DevcontainerError(f"{path}: larger than {MAX_DEVCONTAINER_BYTES // 1024} KiB, not read")
    try:
        document = json.loads(strip_jsonc(text))
    except json.JSONDecodeError as error:
        raise DevcontainerError(f"{path}: not valid JSON with comments: {error}") from None
    if not isinstance(document, dict):
        raise DevcontainerError(f"{path}: not a JSON object")
    try:
        config = Devcontainer.model_validate(document)
    except ValidationError as error:
        detail = error.errors()[0]
        raise DevcontainerError(f"{path}: {'.'.join(map(str, detail['loc']))}: {detail['msg']}") from None
    if config.features:
        names = ", ".join(sorted(config.features))
        raise DevcontainerError(
            f"{path}: Dev Container features ({names}) are not supported: they are downloaded from registries; "
            "install the same tools in the Dockerfile or onCreateCommand"
        )
    if (config.image is None) == (config.build is None):
        raise DevcontainerError(f"{path}: give exactly one of `image` and `build.dockerfile`")
    return config


def _commands(name: str, command: Command | None) -> list[SetupStep]:
    """A string runs in a shell, a list is one command without a shell, an object is several named commands."""
    if command is None:
        return []
    if isinstance(command, str):
        return [SetupStep(name=f"devcontainer: {name}", command=command, workdir=WORKSPACE)]
    if isinstance(command, list):
        return [SetupStep(name=f"devcontainer: {name}", command=shlex.join(command), workdir=WORKSPACE)]
    return [step for key, value in command.items() for step in _commands(f"{name} {key}", value)]


def _inside(base: str, relative: str, what: str, path: str) -> str:
    joined = posixpath.normpath(posixpath.join(base, relative))
    if joined == ".." or joined.startswith("../") or joined.startswith("/"):
        raise DevcontainerError(f"{path}: {what} {relative!r} leads outside the repository")
    return "" if joined == "." else joined


def _allowed(images: list[str], bases: BaseImages, path: str) -> None:
    for image in images:
        if (refusal := bases.refusal(image)) is not None:
            raise DevcontainerError(f"{path}: {refusal}")


def devcontainer_parts(
    tree: CommittedTree, path: str, bases: BaseImages
) -> tuple[str | None, DockerfileBase | None, list[SetupStep], dict[str, str]]:
    """Base image or Dockerfile build, lifecycle steps, and the environment variables to keep."""
    config = parse_devcontainer(tree.text(path), path)
    steps = [step for name in LIFECYCLE for step in _commands(name, getattr(config, name))]
    if config.build is None:
        assert config.image is not None
        _allowed([config.image], bases, path)
        return config.image, None, steps, config.containerEnv
    folder = posixpath.dirname(path)
    context = _inside(folder, config.build.context, "build.context", path)
    dockerfile = _inside(folder, config.build.dockerfile, "build.dockerfile", path)
    relative = posixpath.relpath(dockerfile, context or ".")
    if relative.startswith("../"):
        raise DevcontainerError(f"{path}: build.dockerfile {dockerfile} is outside build.context {context or '.'}")
    if not tree.regular(dockerfile):
        raise DevcontainerError(f"{path}: build.dockerfile {dockerfile} is not in the repository")
    try:
        images = base_images(tree.text(dockerfile), dockerfile, config.build.args)
    except DockerfileError as error:
        raise DevcontainerError(str(error)) from None
    _allowed(images, bases, dockerfile)
    base = DockerfileBase(
        context=context,
        dockerfile=relative,
        args=config.build.args,
        context_tree=tree.tree_id(context),
        base_images=images,
    )
    return None, base, steps, config.containerEnv
