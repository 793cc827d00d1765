"""Every listed path, judged: packable text (with its blob id) or excluded with a reason.

Files git reports unchanged take their blob id from the index and their content facts from the per-blob
cache, so a warm run reads no file it does not render.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agent.packing.cache import ContentCache
from agent.packing.classify import (
    ContentFacts,
    ExcludedFile,
    SelectionFlags,
    TextFile,
    TooLarge,
    content_facts,
    excluded_by_name,
    git_blob_id,
    read_bytes_nofollow,
    unreadable,
    verdict,
)
from agent.packing.listing import SYMLINK_MODE, ListedPath, modified_paths

FACTS_TABLE = "facts_v1"  # bump when ContentFacts or its heuristics change


def _trusted_blob(listed: ListedPath, modified: set[bytes]) -> str | None:
    """The index's blob id when the work-tree file is known to match it."""
    if listed.index_blob is None or listed.mode == SYMLINK_MODE or listed.raw in modified:
        return None
    return listed.index_blob


def take_inventory(
    repo_dir: Path,
    listed: list[ListedPath],
    linguist: dict[bytes, str],
    flags: SelectionFlags,
    cache_dir: Path,
    visit: Callable[[TextFile, bytes], None] | None = None,
) -> tuple[list[TextFile], list[ExcludedFile]]:
    """visit(file, bytes) sees every text file this run had to read, so later phases need not read it again."""
    modified = modified_paths(repo_dir)
    cache = ContentCache(cache_dir / "pack-cache.sqlite3", FACTS_TABLE)
    try:
        known = cache.get_many(blob for path in listed if (blob := _trusted_blob(path, modified)) is not None)
        files: list[TextFile] = []
        excluded: list[ExcludedFile] = []
        for path in listed:
            early = excluded_by_name(path, flags)
            if early is not None:
                excluded.append(early)
                continue
            blob = _trusted_blob(path, modified)
            data = None
            if blob is not None and blob in known:
                facts = ContentFacts.from_json(known[blob])
            else:
                try:
                    data = read_bytes_nofollow(repo_dir, path, flags.max_file_bytes)
                except TooLarge as exc:
                    excluded.append(
                        ExcludedFile(path, f"{exc.size} bytes, over the {flags.max_file_bytes}-byte limit", "large")
                    )
                    continue
                except OSError as exc:
                    excluded.append(unreadable(repo_dir, path, exc))
                    continue
                blob = blob or git_blob_id(data)
                facts = content_facts(data)
                cache.put(blob, facts.to_json())
            judged = verdict(path, blob, facts, linguist.get(path.raw), flags)
            if isinstance(judged, TextFile):
                files.append(judged)
                if visit is not None and data is not None:
                    visit(judged, data)
            else:
                excluded.append(judged)
    finally:
        cache.close()
    return files, excluded
