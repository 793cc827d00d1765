"""The cheap static check: a changed source file must still parse if it parsed at baseline.

It catches a broken file even in a repository without tests. The grammars are the packer's (tree-sitter, shipped
compiled); a language the packer does not know is not checked. Sources come from git's blobs, never from paths
on the host, and are parsed only up to a size cap.
"""

from __future__ import annotations

from collections.abc import Callable

import tree_sitter
import tree_sitter_language_pack

from agent.packing.languages import language_for

MAX_CHECKED_BYTES = 2 * 1024 * 1024


def _first_error(language: str, source: bytes) -> tree_sitter.Node | None:
    root = tree_sitter_language_pack.get_parser(language).parse(source).root_node  # type: ignore[arg-type]
    if not root.has_error:
        return None
    pending = [root]
    while pending:
        node = pending.pop()
        if node.is_error or node.is_missing:
            return node
        pending.extend(reversed([child for child in node.children if child.has_error or child.is_missing]))
    return root


def syntax_regressions(paths: list[str], read: Callable[[str, str], bytes | None]) -> list[str]:
    """'path:line: does not parse' for each changed file that parsed at baseline and does not now.

    `read(path, "before" | "after")` gives the file's bytes at the base commit and now, None where it is absent.
    """
    broken: list[str] = []
    for path in paths:
        language = language_for(path)
        after = read(path, "after") if language else None
        if language is None or after is None or len(after) > MAX_CHECKED_BYTES:
            continue
        error = _first_error(language, after)
        if error is None:
            continue
        before = read(path, "before")
        if before is not None and (len(before) > MAX_CHECKED_BYTES or _first_error(language, before) is not None):
            continue
        broken.append(f"{path}:{error.start_point[0] + 1}: does not parse as {language} any more")
    return broken
