"""Every listed path, judged: packable text (with its blob id) or excluded with a reason.

Files git reports unchanged take their blob id from the index and their content facts from the per-blob
cache, so a warm run reads no file it does not render.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

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
from agent.packing.workers import LazyPool

FACTS_TABLE = "facts_v1"  # bump when ContentFacts or its heuristics change

Extracted = TypeVar("Extracted")


@dataclass(frozen=True, slots=True)
class Inventory(Generic[Extracted]):
    files: list[TextFile]
    excluded: list[ExcludedFile]
    extracted: list[Extracted]  # extract(file, bytes) of every text file this run had to read, in listing order


@dataclass(frozen=True, slots=True)
class _ReadJob:
    repo_dir: Path
    listed: ListedPath
    trusted_blob: str | None
    linguist: str | None
    flags: SelectionFlags
    extract: Callable[[TextFile, bytes], object] | None


@dataclass(frozen=True, slots=True)
class _ReadResult:
    judged: TextFile | ExcludedFile
    blob: str | None
    facts: ContentFacts | None  # None when the file could not be read
    extracted: object


def _trusted_blob(listed: ListedPath, modified: set[bytes]) -> str | None:
    """The index's blob id when the work-tree file is known to match it."""
    if listed.index_blob is None or listed.mode == SYMLINK_MODE or listed.raw in modified:
        return None
    return listed.index_blob


def _read_and_judge(job: _ReadJob) -> _ReadResult:
    """Runs in a worker process: only what it returns reaches the caller."""
    flags = job.flags
    try:
        data = read_bytes_nofollow(job.repo_dir, job.listed, flags.max_file_bytes)
    except TooLarge as exc:
        reason = f"{exc.size} bytes, over the {flags.max_file_bytes}-byte limit"
        return _ReadResult(ExcludedFile(job.listed, reason, "large"), None, None, None)
    except OSError as exc:
        return _ReadResult(unreadable(job.repo_dir, job.listed, exc), None, None, None)
    blob = job.trusted_blob or git_blob_id(data)
    facts = content_facts(data)
    judged = verdict(job.listed, blob, facts, job.linguist, flags)
    extracted = job.extract(judged, data) if job.extract is not None and isinstance(judged, TextFile) else None
    return _ReadResult(judged, blob, facts, extracted)


def take_inventory(
    repo_dir: Path,
    listed: list[ListedPath],
    linguist: dict[bytes, str],
    flags: SelectionFlags,
    cache_dir: Path,
    extract: Callable[[TextFile, bytes], Extracted] | None = None,
) -> Inventory[Extracted]:
    """extract(file, bytes) sees every text file this run had to read, so later phases need not read it again.

    Files are read on all cores, so extract must be a module-level function and its result picklable.
    """
    modified = modified_paths(repo_dir)
    cache = ContentCache(cache_dir / "pack-cache.sqlite3", FACTS_TABLE)
    pool = LazyPool()
    try:
        known = cache.get_many(blob for path in listed if (blob := _trusted_blob(path, modified)) is not None)
        judged: list[TextFile | ExcludedFile | None] = []  # None: to be read
        jobs: list[_ReadJob] = []
        for path in listed:
            blob = _trusted_blob(path, modified)
            early = excluded_by_name(path, flags)
            if early is not None:
                judged.append(early)
            elif blob is not None and blob in known:
                judged.append(verdict(path, blob, ContentFacts.from_json(known[blob]), linguist.get(path.raw), flags))
            else:
                judged.append(None)
                jobs.append(_ReadJob(repo_dir, path, blob, linguist.get(path.raw), flags, extract))
        results = iter(pool.map(_read_and_judge, jobs))
        inventory: Inventory[Extracted] = Inventory([], [], [])
        for item in judged:
            if item is None:
                result = next(results)
                item = result.judged
                if result.blob is not None and result.facts is not None:
                    cache.put(result.blob, result.facts.to_json())
                if extract is not None and isinstance(item, TextFile):
                    inventory.extracted.append(result.extracted)  # type: ignore[arg-type]
            if isinstance(item, TextFile):
                inventory.files.append(item)
            else:
                inventory.excluded.append(item)
    finally:
        pool.close()
        cache.close()
    return inventory
