"""The two prompt texts of a task: the system message (instructions, then the repository) and the task message.

The repository is rendered once per task, at the base commit, and never again mid-task; the task comes after it,
so two tasks on the same commit share the whole repository prefix in llama-server's KV cache.
"""

from __future__ import annotations

from pathlib import Path

from agent.config import RunConfig
from agent.packing import PackOptions, pack_repository
from prompts import load_prompt


def pack_options(config: RunConfig, task: str, server_url: str) -> PackOptions:
    # The task only steers which files stay whole when the repository overflows the window; a repository
    # that fits renders the same for every task, so tasks on one commit share the prefix.
    return PackOptions(server_url=server_url, effort=config.llm.effort, task=task)


def system_prompt(worktree: Path, options: PackOptions) -> str:
    packed = pack_repository(worktree, options)
    return f"{load_prompt('system').rstrip()}\n\n{packed.text}"


def task_prompt(task: str, test_command: str | None) -> str:
    return load_prompt("task").format(task=task.strip(), test_command=test_command or "none detected")
