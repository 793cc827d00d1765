"""The sandbox's RPC: one JSON request on stdin to a helper the container runs (tools/in_sandbox/), one JSON reply
line back; a helper's refusal, a timeout or a reply too large becomes the tool's error for the model."""

from __future__ import annotations

import json
from typing import Any

from sandbox.models import restarted_notice
from tools.base import ToolContext, ToolError
from tools.in_sandbox.fileops_helper import MAX_FILE_BYTES

# Room for the largest reply: a whole file at the read cap, numbered and JSON-escaped.
MAX_REPLY_BYTES = 8 * MAX_FILE_BYTES


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
