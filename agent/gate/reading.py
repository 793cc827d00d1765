"""How the gate reads the files a task changed, from the workspace's git blobs (bounded, never a host path).

Many at once: each read would otherwise be a git process of its own, and a gate check reads a dozen or more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

# (path, "before" | "after") pairs -> each pair with the file's bytes at the base commit or now, None where it is
# absent (or too large to read), in the order asked.
ReadFiles = Callable[[Iterable[tuple[str, str]]], Iterable[tuple[tuple[str, str], bytes | None]]]
SIDES = ("before", "after")
