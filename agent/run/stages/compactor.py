"""The loop stage's compactor (agent/conversation/): the window of the server the task's requests go to, that
server's exact count of a request, and the facts a handoff summary carries (the ledger, `git diff --stat` of the
worktree), which the loop itself knows nothing of.

None where there is no server to ask (a scripted model, `eval --oracle`): the loop then compacts nothing, and a
request over the window fails the task as before.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from agent.conversation.compactor import Compactor
from agent.conversation.window import ContextWindow, estimated_tokens
from agent.packing.tokens import DEFAULT_TOKENS_PER_BYTE
from agent.protocol.config import LLMConfig, RunConfig
from agent.server.api import LlamaServerAPI, ServerError
from agent.server.chat import chat_body
from agent.worktree.safe_git import GitError
from agent.worktree.workspace import Workspace
from tools.base import ToolContext

STAT_FILES = 40  # file lines of `git diff --stat` in a summary, then the totals


def server_window(
    server_url: str, tools: list[dict[str, Any]], llm: LLMConfig, compact_at: float
) -> ContextWindow | None:
    """The window of the server at `server_url`, counting requests as the chat client sends them; None when the
    server does not say its window (the first request then says what is wrong with it)."""
    try:
        with LlamaServerAPI(server_url) as api:
            n_ctx = api.context_size()
    except (ServerError, httpx.HTTPError, KeyError, ValueError):
        return None

    def count(messages: list[dict[str, Any]]) -> int:
        body = chat_body(messages, tools, llm.effort)
        try:
            with LlamaServerAPI(server_url, timeout_s=llm.idle_timeout_s) as api:
                return api.input_tokens(body)
        except (ServerError, httpx.HTTPError, KeyError, ValueError):  # a server without the endpoint: estimated
            return estimated_tokens(messages) + int(len(json.dumps(tools)) * DEFAULT_TOKENS_PER_BYTE)

    return ContextWindow(n_ctx, compact_at, count)


def task_facts(workspace: Workspace, context: ToolContext) -> Callable[[], str]:
    """What the agent itself records of the task, for a handoff summary: the ledger and plan, the diff's stat."""

    def facts() -> str:
        lines = []
        if context.ledger is not None:
            lines += [context.ledger.render(context), "The plan:", context.ledger.render_plan()]
        try:
            stat = workspace.diff_stat(max_files=STAT_FILES) or "(no changes yet)"
        except GitError as error:
            stat = f"(unavailable: {error})"
        return "\n".join([*lines, "git diff --stat of the task's changes so far:", stat])

    return facts


def task_compactor(
    config: RunConfig, server_url: str | None, tools: list[dict[str, Any]], workspace: Workspace, context: ToolContext
) -> Compactor | None:
    window = server_window(server_url, tools, config.llm, config.compact_at) if server_url is not None else None
    return Compactor(window, task_facts(workspace, context)) if window is not None else None
