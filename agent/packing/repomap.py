"""The repo map's two halves, both cached per blob id: symbols of every file (for ranking) and outlines of the
files chosen to be shown as outlines (parsed on demand, in the order asked).

On a cold run symbols are taken from the bytes the inventory reads anyway (symbols_of), so no file is
read twice; a warm run reads only the cache.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from agent.packing.cache import PACK_CACHE_FILE, ContentCache
from agent.packing.classify import TextFile, read_bytes_nofollow, read_text
from agent.packing.languages import language_for
from agent.packing.symbols import FileSymbols, extract_symbols
from agent.packing.workers import LazyPool

SYMBOLS_TABLE = "symbols_v2"  # bump when the patterns change: old entries are then ignored
OUTLINES_TABLE = "outlines_v2"  # bump when queries or outline rendering change
RANKINGS_TABLE = "rankings_v1"  # bump when the ranking changes
# Bytes of source to outline before the parsing goes to worker processes: tree-sitter outlines 0.2-0.4 ms of CPU a
# KB, a pool of two forked workers costs 20-50 ms of CPU and 25 ms to start; below this the pool saves no time.
MIN_POOL_OUTLINE_BYTES = 512 * 1024


def state_digest(files: list[TextFile], *salt: str) -> str:
    """Names the repository's state as far as the map goes: every path and blob id, and the symbols' version."""
    salted = "\0".join((SYMBOLS_TABLE, *salt)).encode("utf-8", errors="surrogatepass")
    digest = hashlib.sha1(salted, usedforsecurity=False)
    for text_file in files:
        digest.update(text_file.listed.raw + b"\0" + text_file.blob_id.encode() + b"\n")
    return digest.hexdigest()


def _key(text_file: TextFile) -> str | None:
    language = language_for(text_file.path)
    return f"{text_file.blob_id}:{language}" if language is not None else None


# A file's symbols as plain values (they come back from a worker process): cache key, definitions, references,
# counts, and the JSON the cache stores, encoded in the worker rather than in the waiting parent.
ExtractedSymbols = tuple[str, tuple[str, ...], str, str, str]


def symbols_of(text_file: TextFile, data: bytes) -> ExtractedSymbols | None:
    """An inventory extractor: the file's symbols under their cache key, None where no language applies."""
    key = _key(text_file)
    if key is None:
        return None
    symbols = extract_symbols(key.rpartition(":")[2], data)
    encoded = json.dumps(symbols.to_json(), separators=(",", ":"))
    return key, symbols.definitions, symbols.references, symbols.counts, encoded


class SymbolCollector:
    """Symbols of files as the inventory reads them (what symbols_of extracted), and their cache entries."""

    def __init__(self) -> None:
        self.collected: dict[str, FileSymbols] = {}
        self.encoded: dict[str, str] = {}

    def keep(self, extracted: list[ExtractedSymbols | None]) -> None:
        for item in extracted:
            if item is not None:
                key, definitions, references, counts, encoded = item
                self.collected[key] = FileSymbols(definitions, references, counts)
                self.encoded[key] = encoded


def load_symbols(
    repo_dir: Path, files: list[TextFile], cache_dir: Path, collector: SymbolCollector
) -> list[FileSymbols | None]:
    """Symbols per file (None where no language applies): collected, cached, or read and extracted now."""
    keys = [_key(text_file) for text_file in files]
    collected = collector.collected
    cache = ContentCache(cache_dir / PACK_CACHE_FILE, SYMBOLS_TABLE)
    try:
        found = {
            key: FileSymbols.from_json(value)
            for key, value in cache.get_many(key for key in keys if key is not None and key not in collected).items()
        }
        found.update(collected)
        for key, text_file in zip(keys, files, strict=True):
            if key is not None and key not in found:
                found[key] = extract_symbols(key.rpartition(":")[2], read_bytes_nofollow(repo_dir, text_file.listed))
                cache.put(key, found[key].to_json())
        for key, encoded in collector.encoded.items():
            cache.put_encoded(key, encoded)
    finally:
        cache.close()
    return [found[key] if key is not None else None for key in keys]


class Rankings:
    """Rank orders by repository state and task: a pure function of both, so a hit is exact."""

    def __init__(self, cache_dir: Path) -> None:
        self._cache = ContentCache(cache_dir / PACK_CACHE_FILE, RANKINGS_TABLE)

    @staticmethod
    def key(files: list[TextFile], task: str | None) -> str:
        return state_digest(files, RANKINGS_TABLE, task or "")

    def get(self, key: str) -> list[int] | None:
        return self._cache.get_many([key]).get(key)

    def put(self, key: str, ranked: list[int]) -> None:
        self._cache.put(key, ranked)

    def close(self) -> None:
        self._cache.close()


def _outline_of(context: tuple[Path, list[TextFile]], index: int) -> str:
    # lazy: tree-sitter loads only when something is parsed
    from agent.packing.outline import extract_outline

    repo_dir, files = context
    text_file = files[index]
    language = language_for(text_file.path)
    assert language is not None, "only files with a grammar are outlined"
    return extract_outline(language, read_text(repo_dir, text_file))


class Outlines:
    """Outlines of files by index, parsed the first time they are asked for (a batch's misses on all cores),
    then cached. The batch likely to be asked next is parsed meanwhile, so the workers never wait for the
    caller between batches."""

    def __init__(self, repo_dir: Path, files: list[TextFile], cache_dir: Path) -> None:
        self._files = files
        self._cache = ContentCache(cache_dir / PACK_CACHE_FILE, OUTLINES_TABLE)
        self._pool = LazyPool(
            _outline_of, (repo_dir, files), min_work=MIN_POOL_OUTLINE_BYTES, work=lambda index: files[index].size
        )
        # key -> (waits for the results of the batch it was started in, its position there)
        self._started: dict[str, tuple[Callable[[], list[str]], int]] = {}

    def get_many(self, indices: list[int], upcoming: list[int] | None = None) -> dict[int, str]:
        """Outlines of indices; upcoming (the likely next batch) starts parsing before this returns."""
        keys = self._keys(indices)
        found = self._cache.get_many(keys.values())
        self._start({index: key for index, key in keys.items() if key not in found})
        if upcoming:
            later = self._keys(upcoming)
            cached = self._cache.get_many(later.values())
            self._start({index: key for index, key in later.items() if key not in cached})
        for key in keys.values():
            if key not in found:
                wait, position = self._started.pop(key)
                found[key] = wait()[position]
                self._cache.put(key, found[key])
        return {index: found[key] for index, key in keys.items()}

    def _keys(self, indices: list[int]) -> dict[int, str]:
        return {index: key for index in indices if (key := _key(self._files[index])) is not None}

    def _start(self, wanted: dict[int, str]) -> None:
        """Starts parsing those of wanted (index -> key) not started yet."""
        new: dict[str, int] = {}
        for index, key in wanted.items():
            if key not in self._started:
                new.setdefault(key, index)
        if new:
            wait = functools.cache(self._pool.start(list(new.values())))
            self._started.update((key, (wait, position)) for position, key in enumerate(new))

    def close(self) -> None:
        self._pool.close()
        self._cache.close()
