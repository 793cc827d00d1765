"""One line per step on the terminal (`bundle 3/7: ...`, as scripts/setup.sh prints), everything the tools print
in a log the last line names; a failing step ends with its name and the log's tail."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

TAIL_LINES = 25
PIP_TIMEOUT_S = 1800  # a cold cache downloads every dependency; a source distribution may compile

Say = Callable[[str], None]


class StepFailed(Exception):
    """str() is the one line for the terminal; `tail` is the end of the log."""

    def __init__(self, message: str, tail: list[str]) -> None:
        super().__init__(message)
        self.tail = tail


class Steps:
    def __init__(self, name: str, total: int, log: Path, say: Say) -> None:
        self.name, self.total, self.log, self.say = name, total, log, say
        self.number = 0
        self.current = ""
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")

    def step(self, what: str) -> None:
        self.number += 1
        self.current = what
        self.say(f"{self.name} {self.number}/{self.total}: {what}")
        self.note(f"=== {self.name} {self.number}/{self.total}: {what}")

    def note(self, line: str) -> None:
        with self.log.open("a") as file:
            file.write(line + "\n")

    def run(self, argv: Sequence[str | Path], *, timeout_s: float = PIP_TIMEOUT_S) -> None:
        self.note("$ " + " ".join(str(word) for word in argv))
        with self.log.open("a") as file:
            try:
                done = subprocess.run(
                    [str(word) for word in argv], stdout=file, stderr=subprocess.STDOUT, timeout=timeout_s, check=False
                )
            except (OSError, subprocess.TimeoutExpired) as error:
                raise self.failed(str(error)) from None
        if done.returncode != 0:
            raise self.failed(f"{Path(str(argv[0])).name} exited with {done.returncode}")

    def pip(self, *arguments: str | Path) -> None:
        """This environment's pip (the Python the bundle's wheels are for)."""
        self.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *arguments])

    def failed(self, reason: str) -> StepFailed:
        lines = self.log.read_text(errors="replace").splitlines()
        message = f"step {self.number}/{self.total} ({self.current}) failed: {reason}; the end of {self.log}:"
        return StepFailed(message, lines[-TAIL_LINES:])
