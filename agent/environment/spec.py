"""The `[environment]` table: how a user describes the environment instead of (or on top of) detection.

The same table is read from `run --environment FILE` and can be embedded in any other TOML file of ours.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import ValidationError

from agent.protocol.environment import EnvironmentSpec

TABLE = "environment"


class EnvironmentFileError(Exception):
    """str() is the one line the user sees."""


def load_environment_file(path: Path) -> EnvironmentSpec:
    """The [environment] table of a TOML file; a file without one is an error, not an empty environment."""
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise EnvironmentFileError(f"--environment {path}: cannot read it: {error.strerror}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise EnvironmentFileError(f"--environment {path}: not valid TOML: {error}") from None
    table = document.get(TABLE)
    if not isinstance(table, dict):
        raise EnvironmentFileError(f"--environment {path}: no [{TABLE}] table")
    try:
        spec = EnvironmentSpec.model_validate(table)
    except ValidationError as error:
        detail = error.errors()[0]
        where = ".".join(str(part) for part in detail["loc"])
        raise EnvironmentFileError(f"--environment {path}: [{TABLE}] {where}: {detail['msg']}") from None
    if spec.wheelhouse is not None:
        wheelhouse = (path.parent / spec.wheelhouse).resolve()
        if not wheelhouse.is_dir():
            raise EnvironmentFileError(f"--environment {path}: wheelhouse {wheelhouse} is not a directory")
        spec = spec.model_copy(update={"wheelhouse": wheelhouse})
    return spec
