"""On-disk maps keyed by content (git blob ids), shared by runs, tasks and concurrent packers.

Keys name content, never mtimes, so a hit is exact. SQLite gives atomic writes and lets a run load only the
keys of the repository at hand. A pack opens its tables of one file inside `one_commit`: they share a connection
and their writes are one transaction, at its end (each commit costs SQLite two fsyncs, 2-15 ms of waiting here;
a cold pack's facts, symbols, outlines, rankings, ages and counts were six).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from agent.safety.private_dirs import private_dir

PACK_CACHE_FILE = "pack-cache.sqlite3"
LOOKUP_CHUNK = 900  # below SQLite's default limit on bound parameters

# This thread's files inside one_commit, by path: a packer's tables are opened and written in its own thread.
_batches = threading.local()


def _decoded(value: str) -> Any:
    # Token counts are most of the values a warm run reads: a plain int skips the JSON parser (25x faster).
    return int(value) if value.isdigit() else json.loads(value)


class _CacheFile:
    """A connection to one cache file, and the rows waiting to be written to each of its tables."""

    def __init__(self, path: Path) -> None:
        private_dir(path.parent)
        self.db = sqlite3.connect(path, timeout=30.0, check_same_thread=False)
        self.pending: dict[str, dict[str, str]] = {}  # table -> key -> JSON text
        self.tables: set[str] = set()  # known to exist

    def write(self) -> None:
        """Every table's pending rows, in one transaction. A table is made by the first write, in its transaction: a
        transaction of its own was a second commit for every table of a new cache file."""
        tables = sorted(table for table, rows in self.pending.items() if rows)
        if not tables:
            return
        with self.db:
            # sqlite3 opens a transaction before an INSERT, not before a CREATE: the tables are made in this one.
            self.db.execute("BEGIN")
            for table in tables:
                self.db.execute(f"CREATE TABLE IF NOT EXISTS {table} (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                rows = sorted(self.pending[table].items())
                self.db.executemany(f"INSERT OR REPLACE INTO {table} (key, value) VALUES (?, ?)", rows)
        self.tables.update(tables)
        for table in tables:
            self.pending[table].clear()  # in place: each ContentCache of the table holds this dict


@contextlib.contextmanager
def one_commit(path: Path) -> Iterator[None]:
    """The ContentCaches of `path` this thread opens meanwhile share one connection; their writes (and those of
    every other ContentCache of the same table) are one transaction as this ends, error or not."""
    files: dict[Path, _CacheFile] = _batches.__dict__.setdefault("files", {})
    if path in files:  # inside another: that one writes
        yield
        return
    file = files[path] = _CacheFile(path)
    try:
        yield
    finally:
        del files[path]
        try:
            file.write()
        finally:
            file.db.close()


class ContentCache:
    """One table of key -> JSON value in a SQLite file; writes are buffered until save() (outside one_commit) or
    the end of the one_commit it was opened in."""

    def __init__(self, path: Path, table: str) -> None:
        batch = getattr(_batches, "files", {}).get(path)
        self._file = batch if batch is not None else _CacheFile(path)
        self._own_file = batch is None
        self._table = table
        self._pending = self._file.pending.setdefault(table, {})

    def _table_exists(self) -> bool:
        """Whether the table is there (made by this file's writes, another packer's or an earlier run's)."""
        if self._table not in self._file.tables:
            query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
            if self._file.db.execute(query, (self._table,)).fetchone() is not None:
                self._file.tables.add(self._table)
        return self._table in self._file.tables

    def get_many(self, keys: Iterable[str]) -> dict[str, Any]:
        unique = sorted(set(keys))
        found: dict[str, Any] = {}
        stored = unique if self._table_exists() else []
        for start in range(0, len(stored), LOOKUP_CHUNK):
            chunk = stored[start : start + LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            query = f"SELECT key, value FROM {self._table} WHERE key IN ({marks})"
            found.update((key, _decoded(value)) for key, value in self._file.db.execute(query, chunk))
        found.update((key, _decoded(self._pending[key])) for key in unique if key in self._pending)
        return found

    def put(self, key: str, value: Any) -> None:
        self.put_encoded(key, json.dumps(value, separators=(",", ":")))

    def put_encoded(self, key: str, encoded: str) -> None:
        """value already as compact JSON text (encoded where there was a core to spare)."""
        self._pending[key] = encoded

    def save(self) -> None:
        if self._own_file:
            self._file.write()

    def close(self) -> None:
        self.save()
        if self._own_file:
            self._file.db.close()
