"""The text the model sees. Every piece is a pure function of its inputs, so counts of pieces are cacheable.

The repository comes first and nothing task-specific is rendered here: two tasks on one commit whose
repository fits share the whole rendered prefix, and llama-server reuses its KV cache across them. The commit id
is rendered last, not in the header: at the top it would make every commit's prefix differ from its first line.
"""

from __future__ import annotations

import re
from typing import Protocol

PARTIAL_NOTE = (
    "The repository does not fit in the context. Files marked as outlines show only the signatures of their "
    "definitions, with line numbers; files listed as not shown are omitted. Read any file with your tools."
)
BACKTICK_RUN = re.compile(r"`{3,}")


class Renderer(Protocol):
    def header(self, *, partial: bool) -> str: ...
    def full(self, path: str, text: str) -> str: ...
    def outline(self, path: str, outline: str) -> str: ...
    def unshown_open(self) -> str: ...
    def unshown_line(self, path: str) -> str: ...
    def unshown_close(self) -> str: ...
    def footer(self, commit: str | None) -> str: ...


def _with_final_newline(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


def _xml_attribute(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")


class XmlRenderer:
    def header(self, *, partial: bool) -> str:
        return "<repository>\n" + (f"<note>{PARTIAL_NOTE}</note>\n" if partial else "")

    def full(self, path: str, text: str) -> str:
        return f'<file path="{_xml_attribute(path)}">\n{_with_final_newline(text)}</file>\n'

    def outline(self, path: str, outline: str) -> str:
        return f'<file path="{_xml_attribute(path)}" view="outline">\n{_with_final_newline(outline)}</file>\n'

    def unshown_open(self) -> str:
        return "<files_not_shown>\n"

    def unshown_line(self, path: str) -> str:
        return path + "\n"

    def unshown_close(self) -> str:
        return "</files_not_shown>\n"

    def footer(self, commit: str | None) -> str:
        return (f"<commit>{commit}</commit>\n" if commit else "") + "</repository>\n"


def _fence(text: str) -> str:
    """A backtick fence longer than any run inside the text, so file content cannot close it."""
    longest = max((len(run) for run in BACKTICK_RUN.findall(text)), default=2)
    return "`" * (longest + 1)


class MarkdownRenderer:
    def header(self, *, partial: bool) -> str:
        return "# Repository\n\n" + (f"{PARTIAL_NOTE}\n\n" if partial else "")

    def full(self, path: str, text: str) -> str:
        fence = _fence(text)
        return f"## File: {path}\n\n{fence}\n{_with_final_newline(text)}{fence}\n\n"

    def outline(self, path: str, outline: str) -> str:
        fence = _fence(outline)
        return f"## Outline: {path}\n\n{fence}\n{_with_final_newline(outline)}{fence}\n\n"

    def unshown_open(self) -> str:
        return "## Files not shown\n\n"

    def unshown_line(self, path: str) -> str:
        return f"- {path}\n"

    def unshown_close(self) -> str:
        return "\n"

    def footer(self, commit: str | None) -> str:
        return f"Repository at commit {commit}.\n" if commit else "Repository with no commits yet.\n"


def renderer_for(format_name: str) -> Renderer:
    return MarkdownRenderer() if format_name == "markdown" else XmlRenderer()
