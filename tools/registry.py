"""Tool registry: schemas the model sees and dispatch of its calls.

Nothing the model sends can crash the run: invalid JSON, unknown names, bad arguments and exceptions inside a
tool all come back as an error result the model reads. Only `finish` leaves, by raising FinishRequested.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from agent.safety.control_text import restore_arguments
from sandbox.errors import SandboxLost
from tools.base import FinishRequested, ToolContext, ToolError, ToolResult, ToolSpec
from tools.files import FILE_TOOLS
from tools.finish import FINISH_TOOL
from tools.ledger import LEDGER_TOOLS
from tools.output import cap_text
from tools.shell import SHELL_TOOLS
from tools.symbols import SYMBOL_TOOLS

# The state ledger appended to a result takes at most this share of the result's cap.
LEDGER_MAX_SHARE = 0.25


def _validation_message(error: ValidationError) -> str:
    problems = [f"{'.'.join(str(p) for p in item['loc']) or 'arguments'}: {item['msg']}" for item in error.errors()]
    return "; ".join(problems)


class ToolRegistry:
    def __init__(self, specs: list[ToolSpec]) -> None:
        self._specs = {spec.name: spec for spec in specs}

    @property
    def names(self) -> list[str]:
        return list(self._specs)

    def schemas(self) -> list[dict[str, Any]]:
        return [spec.schema() for spec in self._specs.values()]

    def dispatch(self, name: str, raw_arguments: str, context: ToolContext) -> ToolResult:
        spec = self._specs.get(name)
        if spec is None:
            return ToolResult(text=f"error: unknown tool '{name}'; available: {', '.join(self._specs)}", is_error=True)
        try:
            payload = json.loads(raw_arguments or "{}")
        except json.JSONDecodeError as error:
            return ToolResult(text=f"error: arguments are not valid JSON ({error}); send a JSON object", is_error=True)
        if not isinstance(payload, dict):
            return ToolResult(text="error: arguments must be a JSON object", is_error=True)
        try:
            # Text the model copied from a result or the pack carries the control-token mark: the tool gets the
            # text as the repository has it.
            arguments = spec.arguments.model_validate(restore_arguments(payload))
        except ValidationError as error:
            return ToolResult(text=f"error: invalid arguments for {name}: {_validation_message(error)}", is_error=True)
        try:
            text = spec.handler(arguments, context)
        except (FinishRequested, SandboxLost):  # the end of the task: one the model asked for, one it cannot mend
            raise
        except ToolError as error:
            return ToolResult(text=f"error: {error}", is_error=True)
        except Exception as error:  # a tool bug must not end the night's run; the model sees it and moves on
            return ToolResult(text=f"error: {name} failed: {error.__class__.__name__}: {error}", is_error=True)
        if not spec.changes_files or context.ledger is None:
            return ToolResult(text=cap_text(text, context.output_chars))
        # The ledger counts against the cap like the rest: a plan of hundreds of long old names must not make every
        # result run past it. Its head (the files changed) comes first, so a cut ledger keeps it.
        account = cap_text(context.ledger.render(context), int(context.output_chars * LEDGER_MAX_SHARE))
        return ToolResult(text=f"{cap_text(text, context.output_chars - len(account) - 2)}\n\n{account}")


def default_registry(*, symbol_tools: bool = True, ledger: bool = True) -> ToolRegistry:
    """The tools the model sees; `symbol_tools` and `ledger` are the run's --symbol-tools and --ledger."""
    return ToolRegistry(
        [
            *SHELL_TOOLS,
            *FILE_TOOLS,
            *(SYMBOL_TOOLS if symbol_tools else []),
            *(LEDGER_TOOLS if ledger else []),
            FINISH_TOOL,
        ]
    )
