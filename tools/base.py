"""What every tool is made of, and importing no tool: where commands run (Executor), what a call gets (ToolContext)
and gives (ToolResult, ToolError, FinishRequested), and a tool's declaration (ToolSpec). tools/registry.py holds
them together."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

if TYPE_CHECKING:
    from tools.ledger import Ledger

# File tools run in the sandbox under this timeout of their own (commands have theirs): a read, an edit or a search
# that takes longer is runaway work, a regular expression that backtracks without end say.
FILE_TOOL_TIMEOUT_S = 60.0


class ExecutionResult(Protocol):
    exit_code: int | None
    output: str
    total_bytes: int
    truncated: bool
    timed_out: bool
    duration_s: float
    disk_full: str | None
    sandbox_restarted: str | None  # why the sandbox was replaced during the command, else None


class Executor(Protocol):
    """Where commands run: the Docker sandbox in the product. `stdin` is the command's whole input, else none."""

    def execute(
        self, command: str, *, timeout_s: float | None = None, max_output_bytes: int = ..., stdin: bytes | None = None
    ) -> ExecutionResult: ...


@dataclass
class ToolContext:
    executor: Executor
    test_command: str | None
    command_timeout_s: float
    output_chars: int
    file_tool_timeout_s: float = FILE_TOOL_TIMEOUT_S
    ledger: Ledger | None = None  # the state ledger (--ledger on), appended after calls that change files


class ToolError(Exception):
    """A problem the model caused and can fix; its text is what the model reads."""


class FinishRequested(Exception):
    def __init__(self, summary: str) -> None:
        super().__init__(summary)
        self.summary = summary


class ToolResult(BaseModel):
    text: str
    is_error: bool = False


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    arguments: type[BaseModel]
    handler: Callable[[Any, ToolContext], str]
    # Whether a call may change the worktree's files: the ledger (tools/ledger.py) reports after such calls.
    changes_files: bool = False

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": json.loads(_parameters(self.arguments)),
            },
        }


@functools.cache
def _parameters(arguments: type[BaseModel]) -> str:
    """The argument model's JSON schema, as text: a class's schema never changes, and pydantic builds it anew at each
    call (the default tools' 2 ms, twice per task); each caller gets a copy of its own (json.loads, 0.1 ms)."""
    return json.dumps(arguments.model_json_schema())
