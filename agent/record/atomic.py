"""A file replaced whole or not at all: written beside it under a name of its own (O_EXCL: never a planted link),
flushed to disk, renamed over it, the directory flushed too. A kill -9 at any instant leaves the old file or the new
one, and at most a stray `<name>.*.tmp`, which the next write of that file removes."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, data: bytes) -> None:
    for stray in path.parent.glob(f"{path.name}.*.tmp"):
        with contextlib.suppress(OSError):
            stray.unlink()
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
