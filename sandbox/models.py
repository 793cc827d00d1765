"""Configuration of a sandbox and the outcome of one command in it."""

from pydantic import BaseModel, Field

DEFAULT_IMAGE = "refactor-agent-sandbox:latest"

# Sizes as Docker and tmpfs both take them: a number of bytes, or of k, m or g.
SIZE_PATTERN = r"^[0-9]+[kmgKMG]?$"

# Why a sandbox was replaced by a fresh container with the same mounts, as the model reads it.
PROCESS_LIMIT_HIT = "the sandbox hit its process limit"
CONTAINER_GONE = "the sandbox container was removed or stopped from outside"


def restarted_notice(reason: str) -> str:
    """What the model reads after its sandbox was replaced: it must not count on anything it had started."""
    return f"{reason} and was restarted: processes and files outside /workspace are gone"


class SandboxLimits(BaseModel):
    memory: str = Field(default="4g", pattern=SIZE_PATTERN)
    cpus: float = Field(default=2.0, gt=0)
    pids: int = Field(default=512, gt=0)
    command_timeout_s: float = Field(default=600.0, gt=0)
    # /tmp is a tmpfs, so what commands write there counts against `memory` as well.
    tmp_size: str = Field(default="1g", pattern=SIZE_PATTERN)
    # The workspace is a bind mount: what commands write there lands on the host's disk, which no container
    # limit bounds. Growth is measured as the drop of that disk's free space since the sandbox started.
    workspace_growth_bytes: int = Field(default=4 * 1024**3, gt=0)
    # A command is stopped when the disk holding the workspace gets this close to full, whatever grew it.
    disk_free_floor_bytes: int = Field(default=1024**3, ge=0)


class ExecResult(BaseModel):
    exit_code: int | None = Field(
        description="None when the command was killed: timeout, output flood, full disk or restarted sandbox"
    )
    output: str = Field(description="stdout and stderr interleaved; head and tail kept when too long")
    total_bytes: int = Field(description="everything the command printed, kept or not")
    truncated: bool
    timed_out: bool
    duration_s: float
    disk_full: str | None = Field(
        default=None, description="why the command counts as filling the disk (one line), None when it did not"
    )
    sandbox_restarted: str | None = Field(
        default=None,
        description="why the container was replaced by a fresh one (its process limit, or removed from outside); "
        "None when it was not",
    )
