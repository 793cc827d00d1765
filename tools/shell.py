"""Commands, always inside the sandbox: the host never runs what the model writes."""

from __future__ import annotations

from pydantic import BaseModel, Field

from sandbox.models import restarted_notice
from tools.base import ToolContext, ToolError, ToolSpec

# The sandbox keeps at most this much of a command's output in memory; the model sees less (output_chars).
MAX_CAPTURED_BYTES = 256_000


def _run(context: ToolContext, command: str, timeout_s: float) -> str:
    result = context.executor.execute(command, timeout_s=timeout_s, max_output_bytes=MAX_CAPTURED_BYTES)
    if result.disk_full is not None:
        status = f"stopped: the command filled the disk ({result.disk_full})"
    elif result.sandbox_restarted and result.exit_code is None:
        status = f"killed: {result.sandbox_restarted}"
    elif result.timed_out:
        status = f"timed out after {timeout_s:g}s: the command was killed"
    elif result.exit_code is None:
        status = "killed: output passed the capture ceiling"
    else:
        status = f"exit code {result.exit_code}"
    size = f", {result.total_bytes} bytes of output" + (" (truncated)" if result.truncated else "")
    notice = f"[{restarted_notice(result.sandbox_restarted)}]\n" if result.sandbox_restarted else ""
    return f"{notice}[{status}{size}, {result.duration_s:.1f}s]\n{result.output}"


class BashArguments(BaseModel):
    command: str = Field(description="Shell command run with bash in /workspace (the repository), no network.")
    timeout: int | None = Field(None, ge=1, le=7200, description="Seconds before the command is killed.")


def bash(arguments: BashArguments, context: ToolContext) -> str:
    if not arguments.command.strip():
        raise ToolError("command must not be empty")
    return _run(context, arguments.command, float(arguments.timeout or context.command_timeout_s))


class RunTestsArguments(BaseModel):
    pass


def run_tests(_arguments: RunTestsArguments, context: ToolContext) -> str:
    if context.test_command is None:
        raise ToolError("no test command is configured or detected; run the tests yourself with bash")
    return f"$ {context.test_command}\n" + _run(context, context.test_command, context.command_timeout_s)


SHELL_TOOLS = [
    ToolSpec(
        "bash", "Run a shell command in the repository's sandbox (no network).", BashArguments, bash, changes_files=True
    ),
    ToolSpec("run_tests", "Run the repository's test suite in the sandbox.", RunTestsArguments, run_tests),
]
