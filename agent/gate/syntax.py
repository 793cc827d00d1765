"""The cheap static check: a changed source file must still parse if it parsed at baseline.

It catches a broken file even in a repository without tests. The grammars are the packer's (tree-sitter, shipped
compiled); a language the packer does not know is not checked. Sources come from git's blobs, never from paths
on the host, and are parsed only up to a size cap.
"""

from __future__ import annotations

import tree_sitter
import tree_sitter_language_pack

from agent.gate.reading import ReadFiles
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


def syntax_regressions(paths: list[str], read: ReadFiles) -> list[str]:
    """'path:line: does not parse' for each changed file that parsed at baseline and does not now.

    `read` gives files' bytes at the base commit ("before") and now ("after"), None where they are absent; each is
    parsed as it comes, so one file at a time is held.
    """
    languages = {path: language for path in paths if (language := language_for(path)) is not None}
    errors: dict[str, int] = {}  # path -> the line of its first error now
    for (path, _), after in read((path, "after") for path in languages):
        if after is None or len(after) > MAX_CHECKED_BYTES:
            continue
        if (error := _first_error(languages[path], after)) is not None:
            errors[path] = error.start_point[0] + 1
    broken: list[str] = []
    for (path, _), before in read((path, "before") for path in errors) if errors else ():
        language = languages[path]
        if before is not None and (len(before) > MAX_CHECKED_BYTES or _first_error(language, before) is not None):
            continue
        broken.append(f"{path}:{errors[path]}: does not parse as {language} any more")
    return broken
