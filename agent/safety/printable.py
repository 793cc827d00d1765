"""Text from a repository, a model or a test run made safe to show on a terminal: shown, never obeyed.

A control character or an escape sequence in a reason, a test's last line, a file name or a diff would otherwise
drive the reader's terminal (OSC 52 writes the clipboard, CSI clears the screen or moves the cursor, bidi overrides
reorder what is read), and a `[` in text given to rich would be read as markup. Every line a run, `review` or a
report shows goes through here: control characters become visible (`\\x1b`), and rich gets `Text`, never markup.
"""

from __future__ import annotations

import re

from rich.text import Text

# C0 but tab and newline, DEL, C1; and the bidirectional overrides and isolates ("Trojan Source").
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_OR_LINE_BREAK = re.compile(_CONTROL.pattern[:-1] + r"\t\n]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str, *, one_line: bool = False) -> str:
    """The text with every control character shown as `\\xNN` (tab and newline kept, unless `one_line`)."""
    return (_CONTROL_OR_LINE_BREAK if one_line else _CONTROL).sub(_visible, text)


def rich_text(text: str, style: str = "") -> Text:
    """For a rich table cell or title: printable, and never parsed as markup (a `[/]` in it is just text)."""
    return Text(printable(text), style=style)


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """`1 test`, `2 tests`: every count the product shows, its noun agreeing (`plural` when not noun + s)."""
    return f"{number:,} {noun if number == 1 else plural or noun + 's'}"
