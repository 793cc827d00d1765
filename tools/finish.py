from __future__ import annotations

from pydantic import BaseModel, Field

from tools.base import FinishRequested, ToolContext, ToolError, ToolSpec


class FinishArguments(BaseModel):
    summary: str = Field(description="What you changed and why; it becomes the commit message.")


def finish(arguments: FinishArguments, _context: ToolContext) -> str:
    if not arguments.summary.strip():
        raise ToolError("summary must not be empty: describe the change, it becomes the commit message")
    raise FinishRequested(arguments.summary.strip())


FINISH_TOOL = ToolSpec(
    name="finish",
    description="End the task. Call it once the change is complete and the tests pass.",
    arguments=FinishArguments,
    handler=finish,
)
