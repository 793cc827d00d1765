"""What a bundle holds, written beside its files as manifest.json: versions, the Python and architecture its
wheels are for, the images, and the sha256 of every file. The far side's install.py reads it with the standard
library alone, so it stays plain JSON."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel

MANIFEST = "manifest.json"
FORMAT = 1
WHEELS_DIR = "wheels"
IMAGES_DIR = "images"
TEMPLATES_DIR = "templates"
ENVIRONMENTS_DIR = "environments"
_CHUNK = 1024 * 1024


class CarriedImage(BaseModel):
    name: str  # as `docker load` tags it
    id: str  # what it must be once loaded
    file: str  # relative to the bundle


class CarriedEnvironment(BaseModel):
    """A repository's wheelhouse (`env bundle`): the [environment] file that names it, for Python `python`."""

    repository: str
    environment_file: str
    python: str
    wheels: int


class Manifest(BaseModel):
    format: int = FORMAT
    refactor_agent: str  # the version, as pip asks for it
    python: str  # major.minor: the wheels are built for it
    machine: str  # platform.machine()
    made: str
    made_on: str  # the connected machine's OS, for the person reading it
    project_wheel: str
    llama_server_wheel: str
    llama_server_origin: str
    model_wheel: str
    images: list[CarriedImage] = []
    environments: dict[str, CarriedEnvironment] = {}
    files: dict[str, str] = {}  # relative path -> sha256

    def add_files(self, root: Path, paths: list[Path]) -> None:
        for path in paths:
            self.files[path.relative_to(root).as_posix()] = sha256_of(path)

    def save(self, root: Path) -> None:
        self.files = dict(sorted(self.files.items()))
        (root / MANIFEST).write_text(self.model_dump_json(indent=2) + "\n")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def load_manifest(root: Path) -> Manifest | None:
    """The bundle's manifest, or None when `root` holds none (a folder that is only a wheelhouse)."""
    path = root / MANIFEST
    if not path.is_file():
        return None
    return Manifest.model_validate(json.loads(path.read_text()))
