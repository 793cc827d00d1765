"""Folders of the user's own data, created readable by the user alone (0700).

A run record's transcript holds the whole packed repository and every file the model read; the packer's caches,
the saved prefixes (a KV cache is the repository in another form) and the baselines are derived from it. On a
shared machine none of it is for other users to read.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

PRIVATE_MODE = 0o700


def private_dir(path: Path) -> Path:
    """`path`, created with every missing parent at 0700 (`mkdir -p` would give the parents the umask's mode);
    folders that already exist keep theirs. Returns `path`."""
    missing = []
    current = path.absolute()
    while not current.is_dir() and current != current.parent:
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        # Another process (a parallel task, a second run) may create it first; the mode is then its.
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=PRIVATE_MODE)
    return path
