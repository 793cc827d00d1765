"""File tools. Their work runs inside the task's sandbox (tools/in_sandbox/fileops_helper.py), like `bash`: the
host never opens a path the model names, so links, races, pipes, huge files and costly regular expressions
stay there."""

from __future__ import annotations

import functools
import shlex
from importlib import resources

from pydantic import BaseModel, Field

from tools.base import ToolContext, ToolSpec
from tools.rpc import call_helper


@functools.cache
def _helper_command() -> str:
    """`python3 -I` (isolated: no PYTHON* variables, no workspace files on sys.path) running the helper's source."""
    source = resources.files("tools.in_sandbox").joinpath("fileops_helper.py").read_text(encoding="utf-8")
    return f"python3 -I -c {shlex.quote(source)}"


def _in_sandbox(context: ToolContext, operation: str, arguments: BaseModel) -> str:
    return call_helper(context, _helper_command(), {"op": operation, **arguments.model_dump()})


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
