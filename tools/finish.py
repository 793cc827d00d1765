from __future__ import annotations

from pydantic import BaseModel, Field

from tools.base import FinishRequested, ToolContext, ToolError, ToolSpec


class FinishArguments(BaseModel):
    summary: str = Field(description="What you changed and why; it becomes the commit message.")


def finish(arguments: FinishArguments, context: ToolContext) -> str:
    if not arguments.summary.strip():
        raise ToolError("summary must not be empty: describe the change, it becomes the commit message")
    reminder = context.ledger.reminder(context) if context.ledger is not None else None
    if reminder is not None:  # once per task: the next finish is accepted whatever the ledger says
        return reminder
    raise FinishRequested(arguments.summary.strip())


FINISH_TOOL = ToolSpec(
    name="finish",
    description="End the task. Call it once the change is complete and the tests pass.",
    arguments=FinishArguments,
    handler=finish,
)
