"""What the model may call. Each tool's pydantic argument model is the JSON schema the model sees."""

from tools.base import FinishRequested, ToolContext, ToolRegistry, ToolResult, default_registry

__all__ = ["FinishRequested", "ToolContext", "ToolRegistry", "ToolResult", "default_registry"]
