"""The baseline stage: the suite on the untouched worktree, in the sandbox, while the host packs the repository for
the system prompt: the baseline costs the first request nothing it would not have waited for anyway. A task with
`before` commands runs them in between instead (baseline, then the commands, then the pack): the baseline must see
the untouched base and the pack the files as the commands left them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from agent.gate.stage import Gate
from agent.packing import RepoGit
from agent.prompt import SystemPrompt, pack_options, system_prompt
from agent.protocol.events import Retry
from agent.run.stages.commands import CommandFailed, run_commands
from agent.run.stages.task import TaskContext
from agent.run.time_limit import wait_in_time
from agent.server.chat import RetryPolicy
from agent.worktree.workspace import Workspace, wip_ref


def baseline_and_prompt(
    gate: Gate, workspace: Workspace, context: TaskContext, *, resuming: bool
) -> SystemPrompt | None:
    """The baseline run (kept by the gate); the system prompt, or None for a task resumed with its conversation.
    Raises CommandFailed when a `before` command fails (no model request is made)."""
    config = context.config
    retry = RetryPolicy(config.llm, on_retry=lambda message: context.emit(Retry(message=message)))
    before = config.before if not resuming else []
    pool = ThreadPoolExecutor(max_workers=1)
    system = None
    try:
        baseline = pool.submit(gate.baseline)
        if before:
            wait_in_time(baseline)
            failure = run_commands(gate.executor, before, "before", timeout_s=config.command_timeout_s)
            if failure is not None:
                raise CommandFailed(failure.describe())
            workspace.stage()
            workspace.snapshot(wip_ref(context.run_id, context.index))  # kept for resume, like a tool call's files
        if not resuming:
            options = pack_options(config, context.task, context.server_url)
            system = system_prompt(workspace.path, options, retry, _packer_git(workspace))
        wait_in_time(baseline)  # the task's TimeUp must not wait for the whole suite
    finally:  # a stop signal must not wait for the suite: leaving the sandbox ends its command
        pool.shutdown(wait=False, cancel_futures=True)
    return system


def _packer_git(workspace: Workspace) -> RepoGit:
    """The packer's git, as the workspace's own: the suite that runs meanwhile may rewrite the worktree's `.git`."""
    return RepoGit(tuple(workspace.git.command()), cwd=workspace.path, env=workspace.git.environment())
