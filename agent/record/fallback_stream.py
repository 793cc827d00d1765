"""A standard stream that carries on in the run's log file once its reader has gone.

`refactor-agent run ... | head -1`, a closed terminal or a full cron mail pipe must not end a night's run: the
first failed write switches the stream to runs/<run-id>/output.log, and the run goes on with its exit code as usual.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import TextIO


class FallbackStream(io.TextIOBase):
    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._log_file: Path | None = None
        self._log: TextIO | None = None
        # Written to the stream but not yet flushed through it: lost with the reader unless kept for the log.
        self._unflushed: list[str] = []
        # Diverted before the log file is known (the run directory comes after the preflight).
        self._pending: list[str] = []
        self.broken = False

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return not self.broken and self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                self._stream.write(text)
                self._unflushed.append(text)
                return len(text)
            except OSError:
                self._break()
        self._divert(text)
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
                self._unflushed.clear()
                return
            except OSError:
                self._break()
        if self._log is not None:
            self._log.flush()

    def divert_to(self, log_file: Path) -> None:
        """Where output goes once the stream breaks (or went, if it already has); created only then."""
        self._log_file = log_file
        pending, self._pending = self._pending, []
        for text in pending:
            self._divert(text)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
        super().close()

    def _break(self) -> None:
        self.broken = True
        # The interpreter flushes the standard streams at exit: with /dev/null under the descriptor that flush
        # succeeds, instead of printing "Exception ignored ... BrokenPipeError" after a run that went well.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        unflushed, self._unflushed = self._unflushed, []
        for text in unflushed:
            self._divert(text)

    def _divert(self, text: str) -> None:
        if self._log_file is None:
            self._pending.append(text)
            return
        if self._log is None:
            self._log = self._log_file.open("a", encoding="utf-8")
        self._log.write(text)
        self._log.flush()
