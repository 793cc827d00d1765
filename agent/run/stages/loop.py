"""The loop stage: the agent loop (agent/loop.py) with the task's model behind its saved prefixes, the tools the
run allows, the time-is-up notice, the wip snapshot after each tool result and the compactor that keeps the
conversation within the server's window; a new conversation, or the one
rebuilt from the transcript when the task is resumed."""

from __future__ import annotations

from collections.abc import Sequence

from agent.loop import AgentLoop, LoopResult
from agent.prompt import task_prompt
from agent.record.progress import RESTARTED_MESSAGE, TaskProgress
from agent.run.stages.compactor import task_compactor
from agent.run.stages.task import TaskContext
from agent.run.time_limit import time_notice
from agent.server.kv_cache import prefix_cached
from agent.worktree.workspace import Workspace
from tools.base import ToolContext
from tools.registry import default_registry


def task_loop(
    context: TaskContext,
    tools: ToolContext,
    end: float | None,
    workspace: Workspace,
    boundaries: Sequence[int] = (),
) -> AgentLoop:
    """`boundaries`: where the pack's churn tiers end in the system message (saved as prefixes too)."""
    config = context.config
    registry = default_registry(symbol_tools=config.symbol_tools, ledger=config.ledger)
    return AgentLoop(
        prefix_cached(context.model, context.prefix_cache, boundaries),
        registry,
        tools,
        max_turns=config.max_turns,
        emit=context.emit,
        max_tokens=config.max_tokens_per_task,
        notice=time_notice(end),
        checkpoint=context.checkpoint,
        compactor=task_compactor(config, context.server_url, registry.schemas(), workspace, tools),
    )


def run_loop(
    loop: AgentLoop, system: str | None, context: TaskContext, test_command: str | None, resumed: TaskProgress | None
) -> LoopResult:
    if resumed is not None and resumed.messages:
        loop.requests = list(resumed.requests)
        loop.compactions = list(resumed.compactions)
        return loop.continue_from(
            resumed.messages, turn=resumed.turn, recorded=resumed.recorded, message=RESTARTED_MESSAGE
        )
    assert system is not None, "a new conversation has its system prompt"
    return loop.run(system, task_prompt(context.task, test_command))
