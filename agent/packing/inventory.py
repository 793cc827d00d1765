"""Every listed path, judged: packable text (with its blob id) or excluded with a reason.

Files git reports unchanged take their blob id from the index and their content facts from the per-blob
cache, so a warm run reads no file it does not render.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from agent.packing.cache import PACK_CACHE_FILE, ContentCache
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
from agent.packing.listing import SYMLINK_MODE, ListedPath
from agent.packing.workers import LazyPool

FACTS_TABLE = "facts_v1"  # bump when ContentFacts or its heuristics change
# Files to read before the reads go to worker processes: reading, judging and taking the symbols of a file takes
# 0.2-0.6 ms here, a pool of two forked workers 20-50 ms of CPU (more the larger this process) and 25 ms to start,
# so a few dozen files are read sooner, and with far less CPU, in this process.
MIN_POOL_READS = 128

Extracted = TypeVar("Extracted")


@dataclass(frozen=True, slots=True)
class Inventory(Generic[Extracted]):
    files: list[TextFile]
    excluded: list[ExcludedFile]
    extracted: list[Extracted]  # extract(file, bytes) of every text file this run had to read, in listing order


@dataclass(frozen=True, slots=True)
class _ReadContext:
    """What every read shares; it reaches worker processes through the fork, so only indices are sent."""

    repo_dir: Path
    flags: SelectionFlags
    extract: Callable[[TextFile, bytes], object] | None
    to_read: list[tuple[ListedPath, str | None, str | None]]  # (path, trusted blob id, linguist attribute)


# (blob id, ContentFacts.to_json(), (reason, category) when excluded, what extract returned): plain values, since
# pickling them is the price of each file read in a worker.
_ReadResult = tuple[str | None, list[object] | None, tuple[str, str] | None, object]


def _trusted_blob(listed: ListedPath, modified: set[bytes]) -> str | None:
    """The index's blob id when the work-tree file is known to match it."""
    if listed.index_blob is None or listed.mode == SYMLINK_MODE or listed.raw in modified:
        return None
    return listed.index_blob


def _read_and_judge(context: _ReadContext, index: int) -> _ReadResult:
    """Runs in a worker process: only what it returns reaches the caller."""
    listed, trusted_blob, linguist = context.to_read[index]
    flags = context.flags
    try:
        data = read_bytes_nofollow(context.repo_dir, listed, flags.max_file_bytes)
    except TooLarge as exc:
        return None, None, (f"{exc.size} bytes, over the {flags.max_file_bytes}-byte limit", "large"), None
    except OSError as exc:
        excluded = unreadable(context.repo_dir, listed, exc)
        return None, None, (excluded.reason, excluded.category), None
    blob = trusted_blob or git_blob_id(data)
    facts = content_facts(data)
    judged = verdict(listed, blob, facts, linguist, flags)
    if isinstance(judged, ExcludedFile):
        return blob, facts.to_json(), (judged.reason, judged.category), None
    extracted = context.extract(judged, data) if context.extract is not None else None
    return blob, facts.to_json(), None, extracted


def take_inventory(
    repo_dir: Path,
    listed: list[ListedPath],
    linguist: dict[bytes, str],
    modified: set[bytes],
    flags: SelectionFlags,
    cache_dir: Path,
    extract: Callable[[TextFile, bytes], Extracted] | None = None,
    meanwhile: Callable[[], object] | None = None,
) -> Inventory[Extracted]:
    """`modified`: listing.modified_paths of the repository. extract(file, bytes) sees every text file this run had
    to read, so later phases need not read it again.

    Files are read on all cores, so extract's result must be picklable. meanwhile() runs in this process while
    the workers read (when there is anything to read): the caller's chance to prepare the next phase with a
    core that would otherwise wait.
    """
    cache = ContentCache(cache_dir / PACK_CACHE_FILE, FACTS_TABLE)
    context = _ReadContext(repo_dir, flags, extract, [])
    pool = LazyPool(_read_and_judge, context, min_work=MIN_POOL_READS)
    try:
        known = cache.get_many(blob for path in listed if (blob := _trusted_blob(path, modified)) is not None)
        judged: list[TextFile | ExcludedFile | None] = []  # None: to be read
        for path in listed:
            blob = _trusted_blob(path, modified)
            early = excluded_by_name(path, flags)
            if early is not None:
                judged.append(early)
            elif blob is not None and blob in known:
                judged.append(verdict(path, blob, ContentFacts.from_json(known[blob]), linguist.get(path.raw), flags))
            else:
                judged.append(None)
                context.to_read.append((path, blob, linguist.get(path.raw)))
        wait = pool.start(range(len(context.to_read)))
        if meanwhile is not None and context.to_read:
            meanwhile()
        results = iter(wait())
        inventory: Inventory[Extracted] = Inventory([], [], [])
        for path, item in zip(listed, judged, strict=True):
            if item is None:
                blob, facts, excluded, extracted = next(results)
                if blob is not None and facts is not None:
                    cache.put(blob, facts)
                if excluded is not None:
                    item = ExcludedFile(path, *excluded)
                else:
                    item = TextFile(path, blob, facts[0], facts[1])  # type: ignore[arg-type,index]
                    if extract is not None:
                        inventory.extracted.append(extracted)  # type: ignore[arg-type]
            if isinstance(item, TextFile):
                inventory.files.append(item)
            else:
                inventory.excluded.append(item)
    finally:
        pool.close()
        cache.close()
    return inventory
