"""Baselines computed once per (base commit, test command, sandbox image) and kept in the runs directory.

Ten tasks on one commit run the suite once. The cache is plain JSON under runs/.baselines/, written with a
rename so a killed run never leaves half a file; a file that does not parse is treated as absent.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
import time
from pathlib import Path

import docker
from pydantic import ValidationError

from agent.gate.results import SuiteRun
from agent.safety.private_dirs import private_dir

CACHE_DIR_NAME = ".baselines"


def image_identity(client: docker.DockerClient, image: str) -> str:
    """The image's id for the cache key (a rebuilt image under the same tag is another environment)."""
    try:
        return client.images.get(image).id
    except docker.errors.DockerException:
        return image


def baseline_key(base_commit: str, test_command: str, image_id: str) -> str:
    material = json.dumps([base_commit, test_command, image_id])
    return hashlib.sha256(material.encode()).hexdigest()[:32]


class BaselineCache:
    def __init__(self, runs_dir: Path) -> None:
        self.directory = runs_dir / CACHE_DIR_NAME

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def get(self, key: str) -> SuiteRun | None:
        try:
            return SuiteRun.model_validate_json(self._path(key).read_bytes())
        except (OSError, ValidationError):
            return None

    def put(self, key: str, suite: SuiteRun) -> None:
        private_dir(self.directory)
        # A partial file of its own: tasks running in parallel (a fleet) may store the same baseline at once.
        descriptor, partial = tempfile.mkstemp(dir=self.directory, prefix=f"{key}.", suffix=".partial")
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(suite.model_dump_json())
        os.replace(partial, self._path(key))

    def prune(self, older_than_s: float, *, dry_run: bool = False) -> list[tuple[Path, int]]:
        """Remove the baselines (and partial files a killed run left) last written more than `older_than_s` ago;
        (path, bytes) of each. Only regular files are looked at (lstat): a link planted here is neither followed
        nor removed."""
        try:
            names = sorted(os.listdir(self.directory))
        except OSError:
            return []
        cutoff = time.time() - older_than_s
        removed = []
        for name in names:
            if not name.endswith((".json", ".partial")):
                continue
            path = self.directory / name
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode) or info.st_mtime >= cutoff:
                continue
            if not dry_run:
                path.unlink(missing_ok=True)
            removed.append((path, info.st_size))
        return removed
