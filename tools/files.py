"""File tools, applied on the host to the bind-mounted worktree (no container round trip per edit)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from pydantic import BaseModel, Field

from tools.base import ToolContext, ToolError, ToolSpec
from tools.paths import display_path, resolve_in_workspace

MAX_SEARCH_MATCHES = 200


def _read_text(path: Path, shown: str) -> str:
    if not path.exists():
        raise ToolError(f"'{shown}' does not exist")
    if path.is_dir():
        raise ToolError(f"'{shown}' is a directory")
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        raise ToolError(f"'{shown}' is a binary file")
    return data.decode("utf-8", errors="replace")


class ViewFileArguments(BaseModel):
    path: str = Field(description="Path relative to the repository root (or under /workspace).")
    start_line: int | None = Field(None, ge=1, description="First line to show (1-based).")
    end_line: int | None = Field(None, ge=1, description="Last line to show (inclusive).")


def view_file(arguments: ViewFileArguments, context: ToolContext) -> str:
    path = resolve_in_workspace(context.workspace, arguments.path)
    shown = display_path(context.workspace, path)
    if path.is_dir():
        children = (entry for entry in path.iterdir() if entry.name != ".git")
        entries = sorted(entry.name + ("/" if entry.is_dir() else "") for entry in children)
        return f"{shown}/ ({len(entries)} entries)\n" + "\n".join(entries)
    lines = _read_text(path, shown).splitlines()
    start = arguments.start_line or 1
    end = min(arguments.end_line or len(lines), len(lines))
    if start > max(len(lines), 1):
        raise ToolError(f"'{shown}' has {len(lines)} lines; start_line {start} is past the end")
    if end < start:
        raise ToolError(f"end_line {end} is before start_line {start}")
    width = len(str(end))
    body = "\n".join(f"{number:>{width}}  {lines[number - 1]}" for number in range(start, end + 1))
    return f"{shown} (lines {start}-{end} of {len(lines)})\n{body}"


class StrReplaceArguments(BaseModel):
    path: str = Field(description="File to edit.")
    old: str = Field(description="Exact text to replace; it must occur exactly once in the file.")
    new: str = Field(description="Replacement text.")


def str_replace(arguments: StrReplaceArguments, context: ToolContext) -> str:
    path = resolve_in_workspace(context.workspace, arguments.path)
    shown = display_path(context.workspace, path)
    text = _read_text(path, shown)
    if not arguments.old:
        raise ToolError("old must not be empty")
    occurrences = text.count(arguments.old)
    if occurrences != 1:
        raise ToolError(
            f"old occurs {occurrences} times in '{shown}'; it must occur exactly once (add surrounding lines)"
        )
    path.write_text(text.replace(arguments.old, arguments.new, 1), encoding="utf-8")
    line = text[: text.index(arguments.old)].count("\n") + 1
    return f"replaced 1 occurrence in '{shown}' at line {line}"


class CreateFileArguments(BaseModel):
    path: str = Field(description="File to create (parent folders are created); an existing file is overwritten.")
    content: str = Field(description="The whole file content.")


def create_file(arguments: CreateFileArguments, context: ToolContext) -> str:
    path = resolve_in_workspace(context.workspace, arguments.path)
    shown = display_path(context.workspace, path)
    if path.is_dir():
        raise ToolError(f"'{shown}' is a directory")
    existed = path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(arguments.content, encoding="utf-8")
    return f"{'overwrote' if existed else 'created'} '{shown}' ({len(arguments.content.splitlines())} lines)"


class SearchArguments(BaseModel):
    pattern: str = Field(description="Python regular expression, matched per line.")
    path: str | None = Field(None, description="File or folder to search in; default the whole repository.")


def _candidate_files(workspace: Path, scope: Path) -> list[Path]:
    """Tracked plus untracked-but-not-ignored files, as git sees them, so build output is not searched."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", str(scope)],
        cwd=workspace,
        capture_output=True,
        check=True,
    ).stdout
    names = sorted({name for name in listing.decode("utf-8", errors="surrogateescape").split("\0") if name})
    return [workspace / name for name in names]


def search(arguments: SearchArguments, context: ToolContext) -> str:
    try:
        regex = re.compile(arguments.pattern)
    except re.error as error:
        raise ToolError(f"invalid regular expression: {error}") from error
    root = context.workspace.resolve()
    scope = resolve_in_workspace(context.workspace, arguments.path) if arguments.path else root
    matches: list[str] = []
    total = 0
    for file in _candidate_files(root, scope):
        if not file.is_file() or file.is_symlink():
            continue
        data = file.read_bytes()
        if b"\0" in data[:8192]:
            continue
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
            if regex.search(line):
                total += 1
                if len(matches) < MAX_SEARCH_MATCHES:
                    matches.append(f"{display_path(root, file)}:{number}: {line.strip()[:300]}")
    if not matches:
        return f"no matches for /{arguments.pattern}/"
    if total > len(matches):
        matches.append(f"[{total - len(matches)} more matches not shown; narrow the pattern or path]")
    return "\n".join(matches)


FILE_TOOLS = [
    ToolSpec("view_file", "Show a file with line numbers (or list a folder).", ViewFileArguments, view_file),
    ToolSpec("str_replace", "Replace one exact, unique occurrence of text.", StrReplaceArguments, str_replace),
    ToolSpec("create_file", "Create or overwrite a file with the given content.", CreateFileArguments, create_file),
    ToolSpec("search", "Search the repository's files for a regular expression.", SearchArguments, search),
]
