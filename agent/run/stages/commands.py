"""The deterministic commands of a task (`before` and `after`: a codemod, a formatter, `ruff check --fix`), run in
the task's sandbox around the model's work, as the repository's own commands: never on the host. `before` runs
once, after the baseline (which must see the untouched base) and before the repository is packed (the model sees
its result); `after` runs before each check of the gate. Their changes are the task's like the model's: the gate
checks them and they are committed on the task's branch.

A `before` that fails ends the task failed before any model request; an `after` that fails makes that check
regressed, and the repair round tells the model the command and the end of its output.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.gate.verdict import GateCheck
from tools.base import Executor

OUTPUT_TAIL_CHARS = 4000  # of a failed command's output, in the repair message


class CommandFailed(Exception):
    """A `before` command failed: str() is the task's reason."""


@dataclass(frozen=True)
class CommandFailure:
    stage: str  # "before" or "after"
    command: str
    exit_code: int | None  # None: killed (its time limit)
    output: str

    def describe(self) -> str:
        ended = "timed out" if self.exit_code is None else f"exited {self.exit_code}"
        last = next((line.strip() for line in reversed(self.output.splitlines()) if line.strip()), "")
        return f"{self.stage} command {self.command!r} {ended}" + (f": {last[:200]}" if last else "")

    def check(self) -> GateCheck:
        """The gate's check when an `after` command failed: regressed, and no suite run on a tree it left half done."""
        return GateCheck(verdict="regressed", reason=self.describe())

    def repair_message(self) -> str:
        return "\n".join(
            [
                f"After your change, the task's {self.stage} command failed, so the tests were not run:",
                f"$ {self.command}",
                self.output[-OUTPUT_TAIL_CHARS:],
                "Fix what it complains about, then call finish.",
            ]
        )


def run_commands(executor: Executor, commands: list[str], stage: str, *, timeout_s: float) -> CommandFailure | None:
    """Each command in turn in the sandbox; the first that fails (and the rest are not run), or None."""
    for command in commands:
        result = executor.execute(command, timeout_s=timeout_s)
        if result.exit_code != 0:
            return CommandFailure(stage, command, result.exit_code, result.output)
    return None
