"""Runs commands as host subprocesses, so the loop's unit tests need no Docker (e2e tests use the sandbox)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from sandbox import ExecResult


class LocalExecutor:
    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.commands: list[str] = []

    def execute(
        self,
        command: str,
        *,
        timeout_s: float | None = None,
        max_output_bytes: int = 256_000,
        stdin: bytes | None = None,
    ) -> ExecResult:
        self.commands.append(command)
        started = time.monotonic()
        try:
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=self.workspace,
                input=stdin if stdin is not None else b"",
                capture_output=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired as expired:
            output = (expired.stdout or b"")[:max_output_bytes].decode(errors="replace")
            return ExecResult(
                exit_code=None,
                output=output,
                total_bytes=len(output),
                truncated=False,
                timed_out=True,
                duration_s=time.monotonic() - started,
            )
        data = done.stdout + done.stderr
        return ExecResult(
            exit_code=done.returncode,
            output=data[:max_output_bytes].decode(errors="replace"),
            total_bytes=len(data),
            truncated=len(data) > max_output_bytes,
            timed_out=False,
            duration_s=time.monotonic() - started,
        )
