"""The text the model sees. Every piece is a pure function of its inputs, so counts of pieces are cacheable.

The repository comes first and nothing task-specific is rendered here: two tasks on one commit whose
repository fits share the whole rendered prefix, and llama-server reuses its KV cache across them. The commit id
is rendered last, not in the header: at the top it would make every commit's prefix differ from its first line.
"""

from __future__ import annotations

import re
from typing import Protocol

from agent.safety.control_text import MARKED_NOTE, neutralise

PARTIAL_NOTE = (
    "The repository does not fit in the context. Files marked as outlines show only the signatures of their "
    "definitions, with line numbers; files listed as not shown are omitted. Read any file with your tools."
)
BACKTICK_RUN = re.compile(r"`{3,}")
# A line longer than this is shown cut, saying how much is left out: one line of a hundred kilobytes (data, a blank
# run, a minified bundle that passed for code) would otherwise take the room of dozens of files. The model can
# read the rest with its tools.
MAX_SHOWN_LINE_CHARS = 2000
# Part of every cached count's key: a change to how pieces render must not reuse counts of the old rendering.
RENDERING = "long lines cut, control-token text marked"


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


def _cut_line(line: str) -> str:
    if len(line) <= MAX_SHOWN_LINE_CHARS:
        return line
    left_out = len(line) - MAX_SHOWN_LINE_CHARS
    return f"{line[:MAX_SHOWN_LINE_CHARS]}[... {left_out} more characters on this line not shown]"


def shown(text: str) -> tuple[str, list[str]]:
    """A file's text (or outline) as the model sees it, and the notes saying how it differs from the file."""
    notes = []
    if len(text) > MAX_SHOWN_LINE_CHARS and any(len(line) > MAX_SHOWN_LINE_CHARS for line in text.split("\n")):
        text = "\n".join(map(_cut_line, text.split("\n")))
        notes.append(f"lines longer than {MAX_SHOWN_LINE_CHARS} characters are cut")
    marked = neutralise(text)
    if marked != text:
        notes.append(MARKED_NOTE)
    return marked, notes


def _xml_attribute(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")


class XmlRenderer:
    def header(self, *, partial: bool) -> str:
        return "<repository>\n" + (f"<note>{PARTIAL_NOTE}</note>\n" if partial else "")

    def full(self, path: str, text: str) -> str:
        return self._file(path, text, "")

    def outline(self, path: str, outline: str) -> str:
        return self._file(path, outline, ' view="outline"')

    @staticmethod
    def _file(path: str, text: str, view: str) -> str:
        body, notes = shown(text)
        note = f' note="{_xml_attribute("; ".join(notes))}"' if notes else ""
        return f'<file path="{_xml_attribute(neutralise(path))}"{view}{note}>\n{_with_final_newline(body)}</file>\n'

    def unshown_open(self) -> str:
        return "<files_not_shown>\n"

    def unshown_line(self, path: str) -> str:
        return neutralise(path) + "\n"

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
        return self._file("File", path, text)

    def outline(self, path: str, outline: str) -> str:
        return self._file("Outline", path, outline)

    @staticmethod
    def _file(kind: str, path: str, text: str) -> str:
        body, notes = shown(text)
        fence = _fence(body)
        note = f" ({'; '.join(notes)})" if notes else ""
        return f"## {kind}: {neutralise(path)}{note}\n\n{fence}\n{_with_final_newline(body)}{fence}\n\n"

    def unshown_open(self) -> str:
        return "## Files not shown\n\n"

    def unshown_line(self, path: str) -> str:
        return f"- {neutralise(path)}\n"

    def unshown_close(self) -> str:
        return "\n"

    def footer(self, commit: str | None) -> str:
        return f"Repository at commit {commit}.\n" if commit else "Repository with no commits yet.\n"


def renderer_for(format_name: str) -> Renderer:
    return MarkdownRenderer() if format_name == "markdown" else XmlRenderer()
