"""Configuration of a sandbox and the outcome of one command in it."""

from pydantic import BaseModel, Field

DEFAULT_IMAGE = "refactor-agent-sandbox:latest"

# Sizes as Docker and tmpfs both take them: a number of bytes, or of k, m or g.
SIZE_PATTERN = r"^[0-9]+[kmgKMG]?$"


class SandboxLimits(BaseModel):
    memory: str = Field(default="4g", pattern=SIZE_PATTERN)
    cpus: float = Field(default=2.0, gt=0)
    pids: int = Field(default=512, gt=0)
    command_timeout_s: float = Field(default=600.0, gt=0)
    # /tmp is a tmpfs, so what commands write there counts against `memory` as well.
    tmp_size: str = Field(default="1g", pattern=SIZE_PATTERN)


class ExecResult(BaseModel):
    exit_code: int | None = Field(description="None when the command was killed for a timeout or an output flood")
    output: str = Field(description="stdout and stderr interleaved; head and tail kept when too long")
    total_bytes: int = Field(description="everything the command printed, kept or not")
    truncated: bool
    timed_out: bool
    duration_s: float
