"""Tags for every parseable file of a repository, from the per-blob cache or parsed on all cores."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from agent.packing.cache import ContentCache
from agent.packing.classify import TextFile, read_text
from agent.packing.tags import FileTags, extract_tags, language_for

TAGS_TABLE = "tags_v1"  # bump when queries or outline rendering change: old entries are then ignored
PARALLEL_MIN_BYTES = 2_000_000  # below this, starting worker processes costs more than it saves

_Job = tuple[str, str, TextFile]


def _extract(repo_dir: str, job: _Job) -> tuple[str, list[object]]:
    key, language, text_file = job
    return key, extract_tags(language, read_text(Path(repo_dir), text_file)).to_json()


def _extract_all(repo_dir: Path, jobs: list[_Job]) -> list[tuple[str, list[object]]]:
    workers = min(os.cpu_count() or 1, 8)
    if workers == 1 or sum(job[2].size for job in jobs) < PARALLEL_MIN_BYTES:
        return [_extract(str(repo_dir), job) for job in jobs]
    # spawn, not fork: the caller may hold threads (HTTP clients), and forking those can deadlock.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        repo = [str(repo_dir)] * len(jobs)
        return list(pool.map(_extract, repo, jobs, chunksize=max(1, len(jobs) // (workers * 8))))


def load_tags(repo_dir: Path, files: list[TextFile], cache_dir: Path) -> list[FileTags | None]:
    """Tags per file (None where no grammar applies), aligned with files."""
    keys: list[str | None] = []
    jobs: dict[str, _Job] = {}
    for text_file in files:
        language = language_for(text_file.path)
        key = f"{text_file.blob_id}:{language}" if language else None
        keys.append(key)
        if key is not None and language is not None:
            jobs.setdefault(key, (key, language, text_file))
    cache = ContentCache(cache_dir / "pack-cache.sqlite3", TAGS_TABLE)
    try:
        found = cache.get_many(jobs)
        missing = [job for key, job in sorted(jobs.items()) if key not in found]
        for key, value in _extract_all(repo_dir, missing):
            cache.put(key, value)
            found[key] = value
    finally:
        cache.close()
    return [FileTags.from_json(found[key]) if key is not None else None for key in keys]
