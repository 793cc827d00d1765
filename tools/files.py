"""File tools. Their work runs inside the task's sandbox (tools/in_sandbox/fileops_helper.py), like `bash`: the
host never opens a path the model names, so links, races, pipes, huge files and costly regular expressions
stay there."""

from __future__ import annotations

import functools
import json
import shlex
from importlib import resources
from typing import Any

from pydantic import BaseModel, Field

from sandbox.models import restarted_notice
from tools.base import ToolContext, ToolError, ToolSpec
from tools.in_sandbox.fileops_helper import MAX_FILE_BYTES

# Room for the largest reply: a whole file at the read cap, numbered and JSON-escaped.
MAX_REPLY_BYTES = 8 * MAX_FILE_BYTES


@functools.cache
def _helper_command() -> str:
    """`python3 -I` (isolated: no PYTHON* variables, no workspace files on sys.path) running the helper's source."""
    source = resources.files("tools.in_sandbox").joinpath("fileops_helper.py").read_text(encoding="utf-8")
    return f"python3 -I -c {shlex.quote(source)}"


def _reply(output: str) -> dict[str, Any] | None:
    """The helper's reply is its last line; anything before it (a warning on stderr, say) is ignored.

    Split on newlines only: JSON leaves U+2028 or U+0085 unescaped, and str.splitlines() would cut the reply there.
    """
    for line in reversed(output.split("\n")):
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(reply, dict) and ("text" in reply or "error" in reply):
            return reply
    return None


def _in_sandbox(context: ToolContext, operation: str, arguments: BaseModel) -> str:
    return call_helper(context, _helper_command(), {"op": operation, **arguments.model_dump()})


def call_helper(context: ToolContext, command: str, request: dict[str, Any], timeout_s: float | None = None) -> str:
    """Send one request to a helper run in the sandbox by `command`; its reply text, or its refusal as ToolError."""
    operation = request["op"]
    timeout_s = timeout_s or context.file_tool_timeout_s
    result = context.executor.execute(
        command, timeout_s=timeout_s, max_output_bytes=MAX_REPLY_BYTES, stdin=json.dumps(request).encode("ascii")
    )
    if result.sandbox_restarted and result.exit_code is None:
        raise ToolError(f"{operation} was stopped: {restarted_notice(result.sandbox_restarted)}; call it again")
    if result.timed_out:
        raise ToolError(
            f"{operation} timed out after {timeout_s:g}s and was stopped (a regular expression that backtracks "
            "without end? simplify it or narrow the path)"
        )
    if result.truncated:
        raise ToolError(f"{operation} failed: its reply passed {MAX_REPLY_BYTES} bytes; ask for less (a line range)")
    reply = _reply(result.output)
    if reply is None:
        tail = result.output.strip()[-300:] or "no output"
        raise ToolError(f"{operation} failed: no reply from the sandbox (exit code {result.exit_code}): {tail}")
    if "error" in reply:
        raise ToolError(str(reply["error"]))
    return str(reply["text"])


class ViewFileArguments(BaseModel):
    path: str = Field(description="Path relative to the repository root (or under /workspace).")
    start_line: int | None = Field(None, ge=1, description="First line to show (1-based).")
    end_line: int | None = Field(None, ge=1, description="Last line to show (inclusive).")


class StrReplaceArguments(BaseModel):
    path: str = Field(description="File to edit.")
    old: str = Field(description="Exact text to replace; it must occur exactly once in the file.")
    new: str = Field(description="Replacement text.")


class CreateFileArguments(BaseModel):
    path: str = Field(description="File to create (parent folders are created); an existing file is overwritten.")
    content: str = Field(description="The whole file content.")


class SearchArguments(BaseModel):
    pattern: str = Field(description="Python regular expression, matched per line.")
    path: str | None = Field(None, description="File or folder to search in; default the whole repository.")


def _file_tool(name: str, description: str, arguments: type[BaseModel], *, changes_files: bool = False) -> ToolSpec:
    return ToolSpec(
        name, description, arguments, lambda given, context: _in_sandbox(context, name, given), changes_files
    )


FILE_TOOLS = [
    _file_tool("view_file", "Show a file with line numbers (or list a folder).", ViewFileArguments),
    _file_tool("str_replace", "Replace one exact, unique occurrence of text.", StrReplaceArguments, changes_files=True),
    _file_tool(
        "create_file", "Create or overwrite a file with the given content.", CreateFileArguments, changes_files=True
    ),
    _file_tool("search", "Search the repository's files for a regular expression.", SearchArguments),
]
