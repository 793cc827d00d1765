"""The models of `eval --oracle` and `eval --noop`: scripted, in-process, no server.

The oracle applies a task's reference patch through the real tool path (one `bash` call running `git apply` in
the task's sandbox, then `finish`), so a suite whose tests, patches and harness agree scores 100%. The no-op model
finishes at once without an edit, so a suite whose tests already pass untouched is caught: it must score 0%.
"""

from __future__ import annotations

import json
from typing import Any

from agent.protocol.model import AssistantTurn, ToolCall

PATCH_DELIMITER = "REFACTOR_AGENT_REFERENCE_PATCH"


class ScriptedChatModel:
    """Plays its tool calls one per turn; past the end it keeps calling `finish` (so the ledger's one reminder,
    given when old names are left, is answered by finishing again)."""

    def __init__(self, name: str, calls: list[tuple[str, dict[str, Any]]]) -> None:
        self.name = name
        self.calls = list(calls)
        self.turn = 0

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        self.turn += 1
        name, arguments = self.calls.pop(0) if self.calls else ("finish", {"summary": "done"})
        call = ToolCall(id=f"{self.name}-{self.turn}", name=name, arguments=json.dumps(arguments))
        return AssistantTurn(tool_calls=[call])


def oracle_model(patch: str, task: str) -> ScriptedChatModel:
    if PATCH_DELIMITER in patch:
        raise ValueError(f"the reference patch of {task} contains {PATCH_DELIMITER}")
    body = patch if patch.endswith("\n") else patch + "\n"
    command = f"git apply --whitespace=nowarn - <<'{PATCH_DELIMITER}'\n{body}{PATCH_DELIMITER}"
    return ScriptedChatModel(
        "oracle", [("bash", {"command": command}), ("finish", {"summary": f"Reference solution of {task}"})]
    )


def noop_model() -> ScriptedChatModel:
    return ScriptedChatModel("noop", [("finish", {"summary": "Nothing to change"})])
