"""On-disk maps keyed by content (git blob ids), shared by runs, tasks and concurrent packers.

Keys name content, never mtimes, so a hit is exact. SQLite gives atomic writes and lets a run load only the
keys of the repository at hand.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agent.safety.private_dirs import private_dir

LOOKUP_CHUNK = 900  # below SQLite's default limit on bound parameters


def _decoded(value: str) -> Any:
    # Token counts are most of the values a warm run reads: a plain int skips the JSON parser (25x faster).
    return int(value) if value.isdigit() else json.loads(value)


class ContentCache:
    """One table of key -> JSON value in a SQLite file; writes are buffered until save()."""

    def __init__(self, path: Path, table: str) -> None:
        private_dir(path.parent)
        self._table = table
        self._db = sqlite3.connect(path, timeout=30.0, check_same_thread=False)
        # The table is made by the first save(), in its transaction: a transaction of its own was a second commit
        # (two fsyncs, most of a cold cache's writing time) for every table of a new cache file.
        self._has_table = False
        self._pending: dict[str, str] = {}  # key -> JSON text

    def _table_exists(self) -> bool:
        """Whether the table is there (made by this cache's save(), another packer's or an earlier run's)."""
        if not self._has_table:
            query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
            self._has_table = self._db.execute(query, (self._table,)).fetchone() is not None
        return self._has_table

    def get_many(self, keys: Iterable[str]) -> dict[str, Any]:
        unique = sorted(set(keys))
        found: dict[str, Any] = {}
        stored = unique if self._table_exists() else []
        for start in range(0, len(stored), LOOKUP_CHUNK):
            chunk = stored[start : start + LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            query = f"SELECT key, value FROM {self._table} WHERE key IN ({marks})"
            found.update((key, _decoded(value)) for key, value in self._db.execute(query, chunk))
        found.update((key, _decoded(self._pending[key])) for key in unique if key in self._pending)
        return found

    def put(self, key: str, value: Any) -> None:
        self.put_encoded(key, json.dumps(value, separators=(",", ":")))

    def put_encoded(self, key: str, encoded: str) -> None:
        """value already as compact JSON text (encoded where there was a core to spare)."""
        self._pending[key] = encoded

    def save(self) -> None:
        if self._pending:
            rows = sorted(self._pending.items())
            with self._db:
                # sqlite3 opens a transaction before an INSERT, not before a CREATE: the table is made in this one.
                self._db.execute("BEGIN")
                self._db.execute(
                    f"CREATE TABLE IF NOT EXISTS {self._table} (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
                )
                self._db.executemany(f"INSERT OR REPLACE INTO {self._table} (key, value) VALUES (?, ?)", rows)
            self._has_table = True
            self._pending = {}

    def close(self) -> None:
        self.save()
        self._db.close()
