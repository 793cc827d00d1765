"""Markdown for text we did not write: the model's summary, test names, file and branch names, reasons, tasks.

report.md and the `review pr` body are rendered by GitHub, GitLab or an editor. Text put in them as it is could
open an HTML comment or a code fence that hides everything after it (the real verdict, the regressed tests, the
deleted files), add raw HTML, links or images, or fake a heading of ours. So each kind has one form here:
- prose (`inline`): one line, with every character that means something inline backslash-escaped (CommonMark
  lets any ASCII punctuation be), and the start of the line kept from opening a list, quote or heading;
- names (`code`): a code span delimited by more backticks than any run inside it;
- the model's own text (`fenced`): a fenced block whose fence is longer than any backtick run inside it.
Control characters are made visible first (a report is read with `cat` too).
"""

from __future__ import annotations

import re

from agent.safety.printable import printable

# Emphasis, code, links and images, raw HTML and autolinks, entities, table cells, strikethrough, math, headings;
# and runs of underscores, but those inside a word (compute_area), which can neither open nor close emphasis.
_INLINE = re.compile(r"[\\`*\[\]<>&|~$#]|_+")
# What opens a block when it starts a line (a list item's text starts one): a list item, a thematic break.
_LINE_START = re.compile(r"^(?:[-+](?=[\s-]|$)|\d+(?=[.)](?:\s|$)))")
_BACKTICKS = re.compile(r"`+")
MIN_FENCE = 3


def _longest_backtick_run(text: str) -> int:
    return max((len(run) for run in _BACKTICKS.findall(text)), default=0)


def inline(text: str) -> str:
    """Prose, rendered as the very characters it holds, on one line."""
    escaped = _INLINE.sub(_escape_inline, printable(text, one_line=True).strip())
    return _LINE_START.sub(_escape_line_start, escaped)


def _escape_inline(match: re.Match[str]) -> str:
    text, start, end = match.string, match.start(), match.end()
    if match.group()[0] == "_" and start > 0 and end < len(text) and text[start - 1].isalnum() and text[end].isalnum():
        return match.group()
    return "".join(f"\\{char}" for char in match.group())


def _escape_line_start(match: re.Match[str]) -> str:
    """`1.` becomes `1\\.` (the digits are no escape's business), `-` becomes `\\-`."""
    opening = match.group()
    return f"{opening}\\" if opening.isdigit() else f"\\{opening}"


def code(text: str, *, in_table: bool = False) -> str:
    """A name as a code span. In a table cell a `|` still ends the cell unless escaped, even inside the span."""
    shown = printable(text, one_line=True)
    fence = "`" * (_longest_backtick_run(shown) + 1)
    padded = f" {shown} " if shown[:1] in ("`", " ") or shown[-1:] in ("`", " ") or not shown else shown
    span = f"{fence}{padded}{fence}"
    return span.replace("|", "\\|") if in_table else span


def fenced(text: str, info: str = "text") -> str:
    """Several lines of someone else's text as a block that nothing inside it can close."""
    shown = printable(text).strip("\n")
    fence = "`" * max(MIN_FENCE, _longest_backtick_run(shown) + 1)
    return f"{fence}{info}\n{shown}\n{fence}"
