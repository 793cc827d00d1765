"""The sandbox stage: the task's sandbox over its worktree (the image its repository's environment gives, the
command limits, the read-only mounts), the tools' context in it and the gate that runs the suite there."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agent.gate.baseline import BaselineCache, baseline_key
from agent.gate.stage import Gate
from agent.gate.test_command import choose_test_command
from agent.protocol.config import RunConfig
from agent.protocol.records import EnvironmentRecord
from agent.run.sandboxes import Sandboxes
from agent.run.stages.task import TaskContext
from agent.worktree.workspace import Workspace
from sandbox import SandboxLimits
from tools.base import ToolContext
from tools.ledger import Ledger, old_names_in
from tools.symbols import sandbox_mounts


@dataclass
class TaskSandbox:
    tools: ToolContext
    gate: Gate
    test_command: str | None


def _tool_mounts(config: RunConfig) -> list[Path]:
    """The symbol tools' helper and libraries, which the ledger uses too (read-only, see tools/symbols.py)."""
    return sandbox_mounts() if config.symbol_tools or config.ledger else []


@contextmanager
def task_sandbox(
    context: TaskContext,
    workspace: Workspace,
    *,
    sandboxes: Sandboxes,
    environment: EnvironmentRecord | None,
    baselines: BaselineCache,
) -> Iterator[TaskSandbox]:
    """Within: the task's sandbox; leaving it (a stop signal too) removes the sandbox and ends its command."""
    config = context.config
    chosen = choose_test_command(config.test_cmd, workspace.path)
    test_command = chosen.command if chosen is not None else None
    image = environment.image_for_tasks(config.image) if environment is not None else config.image
    with sandboxes.open(
        image,
        workspace.path,
        run_id=context.run_id,
        limits=SandboxLimits(command_timeout_s=config.command_timeout_s),
        read_only_paths=[workspace.git_common_dir, *_tool_mounts(config)],
    ) as executor:
        tools = ToolContext(
            executor=executor,
            test_command=test_command,
            command_timeout_s=config.command_timeout_s,
            output_chars=config.tool_output_chars,
            ledger=Ledger(old_names_in(context.task)) if config.ledger else None,
        )
        gate = Gate(
            executor,
            test_command,
            timeout_s=config.suite_timeout_s,
            cache=baselines,
            cache_key=baseline_key(workspace.base_commit, test_command or "", sandboxes.identity(image)),
            emit=context.emit,
            unavailable=environment.unavailable() if environment is not None else None,
        )
        yield TaskSandbox(tools, gate, test_command)
