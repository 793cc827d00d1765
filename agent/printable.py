"""Text from a repository, a model or a test run made safe to show on a terminal."""

from __future__ import annotations

import re

# Control characters (C0 but tab and newline, DEL, C1): a diff, message, file name or test output could drive the
# reader's terminal with them (colours, a window title, cursor moves), so they are shown as \xNN instead.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)
