"""The two prompt texts of a task: the system message (instructions, then the repository) and the task message.

The repository is rendered once per task, at the base commit, and never again mid-task; the task comes after it,
so two tasks on the same commit share the whole repository prefix in llama-server's KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx

from agent.packing import PackOptions, RepoGit, pack_repository
from agent.protocol.config import RunConfig
from agent.server.api import ServerLoading, ServerUnreachable
from agent.server.chat import RetryPolicy
from prompts import load_prompt


def pack_options(config: RunConfig, task: str, server_url: str | None) -> PackOptions:
    # The task only steers which files stay whole when the repository overflows the window; a repository
    # that fits renders the same for every task, so tasks on one commit share the prefix.
    return PackOptions(server_url=server_url, effort=config.llm.effort, task=task)


@dataclass(frozen=True)
class SystemPrompt:
    """The system message and where, in it, a tier of the pack's churn order ends: the saved prefixes keep the slot
    at those offsets too, so a later commit that changes only newer files restores the text before them."""

    text: str
    boundaries: tuple[int, ...] = ()


def system_prompt(worktree: Path, options: PackOptions, retry: RetryPolicy, git: RepoGit | None = None) -> SystemPrompt:
    """Packing counts tokens on the server: a server that is briefly down is retried as model requests are. `git`:
    how the packer reaches the worktree's git (a task's: its workspace's safe git, packing.RepoGit)."""
    packed, _retries = retry.call(lambda: pack_repository(worktree, options, git), _server_down)
    instructions = f"{load_prompt('system').rstrip()}\n\n"
    return SystemPrompt(
        text=instructions + packed.text, boundaries=tuple(len(instructions) + end for end in packed.boundaries)
    )


def _server_down(error: Exception) -> str | None:
    """The reason when the packer failed because the server did not answer (unreachable, loading, 5xx), which a
    retry can cure; None for everything else (the repository, a 4xx), which it cannot."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ServerUnreachable | ServerLoading | httpx.TransportError):
            return str(error)
        if isinstance(cause, httpx.HTTPStatusError) and cause.response.status_code >= 500:
            return str(error)
        cause = cause.__cause__
    return None


def task_prompt(task: str, test_command: str | None) -> str:
    return load_prompt("task").format(task=task.strip(), test_command=test_command or "none detected")
