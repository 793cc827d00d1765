"""DeepSeek V4's tool-call markup (DSML) written as the model writes it, for replies a played server plays.

The format is the one the V4 Flash 0731 template teaches in its `tools_header` and re-renders earlier turns with
(template lines 90-131): `\\n\\n<｜DSML｜tool_calls>`, one `invoke` per call, one `parameter` per argument, string
values verbatim with `string="true"`, others as JSON with `string="false"` in the template's `tojson` spelling
(`", "` and `": "` separators, non-ASCII kept), an invoke without arguments holding one newline. Written this way,
the template's re-rendering of the parsed reply is byte-identical to what was generated, so a divergence the
template tier finds is the product's, not the script's (V4_PLAN §1.2 lists the spellings that would diverge).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DSML = "｜DSML｜"


def param(name: str, value: Any) -> str:
    """One argument: a str verbatim (string="true"), anything else as the template's tojson writes it."""
    if isinstance(value, str):
        return f'<{DSML}parameter name="{name}" string="true">{value}</{DSML}parameter>\n'
    return f'<{DSML}parameter name="{name}" string="false">{json.dumps(value, ensure_ascii=False)}</{DSML}parameter>\n'


def invoke(name: str, **arguments: Any) -> str:
    """One call, its arguments in the order given (the parser wants the schema's order)."""
    body = "".join(param(key, value) for key, value in arguments.items()) or "\n"
    return f'<{DSML}invoke name="{name}">\n{body}</{DSML}invoke>\n'


def block(*invokes: str, name: str = "tool_calls") -> str:
    """The calls of one reply; `name="function_calls"` writes DeepSeek V3.2's block, which V4's parser leaves in
    the content."""
    return f"\n\n<{DSML}{name}>\n{''.join(invokes)}</{DSML}{name}>"


@dataclass(frozen=True)
class Reply:
    """One reply as the model generates it after `<think>`: its reasoning, `</think>`, its text, then its calls.

    cut: the server stops after one more token with finish_reason "length", as when max_tokens ends a reply
    (the text is then what was generated before the cut)."""

    reasoning: str = ""
    content: str = ""
    calls: tuple[str, ...] = ()
    cut: bool = False

    def text(self) -> str:
        """Everything after `</think>`: the content the server continues from."""
        return self.content + (block(*self.calls) if self.calls else "")

    def message(self) -> dict[str, Any]:
        """The assistant message a played server appends for llama-server to continue (prefill_assistant)."""
        return {"role": "assistant", "content": self.text(), "reasoning_content": self.reasoning}
