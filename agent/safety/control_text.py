"""Text that the model's tokenizer would read as control tokens, kept text.

llama-server tokenizes a chat prompt with special tokens parsed: wherever a repository file, a command's output or
a test's name spells one of the model's control tokens (`<|im_start|>`, `<｜User｜>`, `<｜end▁of▁sentence｜>`), it
becomes that token, a turn or a role the repository wrote into the conversation. So every such text that reaches a
prompt (the packed repository, tool results, repair messages) gets a zero-width space after its first character,
which no token's text contains, and says so where it does; the model's tool arguments get the original text back,
so an edit or a command meant for that text still finds it. The mark is a pure function of the text: the system
message stays byte-identical across the tasks of one commit.

The texts are those of the models the product serves (checked against the served SmolLM2's own tokenizer in
tests/safety/test_control_text.py): ChatML-style `<|name|>` tokens (SmolLM2, Qwen, Llama 3), DeepSeek V3/V4's tokens
written with the full-width bar (`<｜User｜>`, `｜DSML｜`) and their `<think>` tags, and SmolLM2's StarCoder-style
`<file_sep>`-like tokens.
"""

from __future__ import annotations

import re
from typing import Any

MARKER = "\u200b"
# Said where text was marked; it names no control token itself, so it needs no mark.
MARKED_NOTE = "text spelling a control token of the model is shown with a zero-width space after its first character"
_ANGLE_WORDS = (
    "think",
    "repo_name",
    "reponame",
    "file_sep",
    "filename",
    "gh_stars",
    "issue_start",
    "issue_comment",
    "issue_closed",
    "jupyter_start",
    "jupyter_text",
    "jupyter_code",
    "jupyter_output",
    "jupyter_script",
    "empty_output",
)
# What follows the first character of a control token's text: after "<" a ChatML name between bars or one of the
# angle words (opening or closing); after DeepSeek's full-width bar, the token's name.
_AFTER_ANGLE = rf"(?=\|[^|<>\s]{{1,64}}\|>|/?(?:{'|'.join(_ANGLE_WORDS)})>)"
_AFTER_BAR = r"(?=[\w\u2581])"
_CONTROL = re.compile(rf"<{_AFTER_ANGLE}|｜{_AFTER_BAR}")
_MARKED = re.compile(rf"(<){MARKER}{_AFTER_ANGLE}|(｜){MARKER}{_AFTER_BAR}")


def neutralise(text: str) -> str:
    """`text` with a zero-width space after the first character of every control token's text in it."""
    return _CONTROL.sub(rf"\g<0>{MARKER}", text)


def restore(text: str) -> str:
    """The inverse of neutralise: a text the model copied from a marked one, as the repository has it."""
    return _MARKED.sub(lambda match: match.group(1) or match.group(2), text)


def restore_arguments(value: Any) -> Any:
    """Every string of a tool call's decoded arguments, restored."""
    if isinstance(value, str):
        return restore(value)
    if isinstance(value, list):
        return [restore_arguments(item) for item in value]
    if isinstance(value, dict):
        return {key: restore_arguments(item) for key, item in value.items()}
    return value


def neutralised_message(text: str) -> str:
    """Text for the prompt built from what the repository or its commands wrote: marked, and saying so first."""
    shown = neutralise(text)
    return shown if shown == text else f"[{MARKED_NOTE}]\n{shown}"
