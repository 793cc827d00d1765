"""Tags for every parseable file of a repository: from the per-blob cache, or parsed by worker processes.

Extraction starts in the background as soon as files are classified, so parsing overlaps token counting
(which the server does); the packer waits for it only when the repository does not fit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from agent.packing.cache import ContentCache
from agent.packing.classify import TextFile, read_text
from agent.packing.options import PackError
from agent.packing.tags import FileTags, extract_tags, language_for

TAGS_TABLE = "tags_v3"  # bump when queries or outline rendering change: old entries are then ignored
PARALLEL_MIN_BYTES = 1_000_000  # below this, starting worker processes costs more than it saves
MAX_WORKERS = 8

_Job = tuple[str, str, TextFile]  # cache key, language, file


def _partition(jobs: list[_Job], workers: int) -> list[list[_Job]]:
    """Largest first onto the least loaded worker: balanced, and the same split every time."""
    shares: list[list[_Job]] = [[] for _ in range(workers)]
    loads = [0] * workers
    for job in sorted(jobs, key=lambda job: (-job[2].size, job[0])):
        lightest = loads.index(min(loads))
        shares[lightest].append(job)
        loads[lightest] += job[2].size
    return [share for share in shares if share]


class TagsExtraction:
    """Tags per file (None where no grammar applies), aligned with the files given."""

    def __init__(self, repo_dir: Path, files: list[TextFile], cache_dir: Path) -> None:
        self._repo_dir = repo_dir
        self._keys: list[str | None] = []
        jobs: dict[str, _Job] = {}
        for text_file in files:
            language = language_for(text_file.path)
            key = f"{text_file.blob_id}:{language}" if language is not None else None
            self._keys.append(key)
            if key is not None and language is not None:
                jobs.setdefault(key, (key, language, text_file))
        self._cache = ContentCache(cache_dir / "pack-cache.sqlite3", TAGS_TABLE)
        self._found = self._cache.get_many(jobs)
        missing = [job for key, job in sorted(jobs.items()) if key not in self._found]
        self._processes: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        self._cancelled = False
        self._pool = ThreadPoolExecutor(max_workers=MAX_WORKERS)
        self._pending: list[Future[list[list[object]]]] = []
        workers = min(os.cpu_count() or 1, MAX_WORKERS)
        if workers > 1 and sum(job[2].size for job in missing) >= PARALLEL_MIN_BYTES:
            self._pending = [self._pool.submit(self._run_worker, share) for share in _partition(missing, workers)]
        elif missing:
            self._pending = [self._pool.submit(self._extract_here, missing)]

    def _extract_here(self, jobs: list[_Job]) -> list[list[object]]:
        return [
            [key, extract_tags(language, read_text(self._repo_dir, file)).to_json()] for key, language, file in jobs
        ]

    def _run_worker(self, jobs: list[_Job]) -> list[list[object]]:
        request = {
            "repo": str(self._repo_dir),
            "jobs": [[key, language, os.fsdecode(file.listed.raw), file.encoding] for key, language, file in jobs],
        }
        with self._lock:
            if self._cancelled:
                return []
            process = subprocess.Popen(
                [sys.executable, "-m", "agent.packing.tags_worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            self._processes.append(process)
        output, errors = process.communicate(json.dumps(request).encode())
        if process.returncode != 0:
            last_line = errors.decode(errors="replace").strip().splitlines()[-1:] or ["killed"]
            raise PackError(f"tag extraction failed (exit {process.returncode}): {last_line[0]}")
        return json.loads(output)

    def result(self) -> list[FileTags | None]:
        try:
            for pending in self._pending:
                for key, value in pending.result():
                    self._cache.put(str(key), value)
                    self._found[str(key)] = value
        finally:
            self.close()
        return [FileTags.from_json(self._found[key]) if key is not None else None for key in self._keys]

    def close(self) -> None:
        """Stops workers whose results are not wanted (the repository fitted after all)."""
        with self._lock:
            self._cancelled = True
            for process in self._processes:
                if process.poll() is None:
                    process.kill()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._cache.close()
