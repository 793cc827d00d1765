"""Resolved settings of a run; written verbatim to runs/<run-id>/config.json."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, Field, field_validator, model_validator

from agent.protocol.effort import Effort  # re-exported: agent.protocol.effort owns it
from agent.protocol.environment import EnvironmentSpec
from sandbox.models import DEFAULT_IMAGE

Executor = Literal["local", "ray"]
Switch = Literal["on", "off"]  # a feature's command-line switch, e.g. --ledger on|off

DEFAULT_SERVER_URL = "http://127.0.0.1:8080/v1"
RETRY_BACKOFF_CAP_S = 60.0  # the longest wait between two retries of a failing server


def http_url(url: str) -> str:
    """Refused here, not deep in an HTTP client: an http(s) URL with a host and a valid port."""
    try:
        address = urlsplit(url)
        address.port  # noqa: B018 - parsing the port is the check (":1" in "http://[::1" is not one)
    except ValueError as error:
        raise ValueError(f"not a URL ({error})") from None
    if address.scheme not in ("http", "https") or not address.hostname:
        raise ValueError("not an http(s) URL with a host, e.g. http://127.0.0.1:8080/v1")
    return url


class SamplingConfig(BaseModel):
    """DeepSeek's agentic sampling: temperature 1.0, top-p 0.95; low temperatures degrade this model."""

    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    seed: int | None = None
    max_tokens: int | None = Field(None, ge=1, description="per response; None lets the server decide")


class LLMConfig(BaseModel):
    server_url: str = DEFAULT_SERVER_URL
    server_explicit: bool = False
    servers: list[Annotated[str, AfterValidator(http_url)]] = Field(
        [], description="--server, repeated for a fleet: every server, the first is server_url; empty: server_url"
    )
    model: str = "deepseek-v4-flash"
    effort: Effort = "max"
    sampling: SamplingConfig = SamplingConfig()
    request_timeout_s: float = Field(3600.0, gt=0, description="backstop for one whole request, progress or not")
    idle_timeout_s: float = Field(
        600.0,
        gt=0,
        description="a request is abandoned after this long with nothing from the server (no token, "
        "no prefill progress): a 500k-token prefill reports progress, so it stays alive",
    )
    max_retries: int = Field(6, ge=0)
    max_resamples: int = Field(3, ge=0, description="re-asks after output that breaks the tool-call format")
    retry_backoff_s: float = Field(2.0, ge=0, description="first wait; doubles per retry up to RETRY_BACKOFF_CAP_S")

    @field_validator("server_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        return http_url(url)

    @field_validator("servers")
    @classmethod
    def _each_once(cls, urls: list[str]) -> list[str]:
        twice = next((url for url in urls if urls.count(url) > 1), None)
        if twice is not None:
            raise ValueError(f"{twice} is named twice")
        return urls

    @model_validator(mode="after")
    def _first_server(self) -> LLMConfig:
        """The first server of a fleet is the run's server (preflight, token counts)."""
        if self.servers:
            self.server_url = self.servers[0]
        return self

    @property
    def fleet(self) -> list[str]:
        """Every server tasks may go to."""
        return self.servers or [self.server_url]


class RunConfig(BaseModel):
    repo: Path
    tasks: list[str] = Field(min_length=1)
    llm: LLMConfig = LLMConfig()
    image: str = DEFAULT_IMAGE
    image_explicit: bool = Field(False, description="--image given: used as is, no environment is built")
    environment: EnvironmentSpec | None = Field(None, description="the [environment] table of --environment FILE")
    allowed_base_images: list[str] = Field(
        [], description="images a repository's devcontainer may build on besides the sandbox image (the user's list)"
    )
    runs_dir: Path = Path("runs")
    max_turns: int = Field(100, ge=1)
    test_cmd: str | None = None
    command_timeout_s: float = Field(600.0, gt=0)
    repair_rounds: int = Field(2, ge=0, description="times the gate may send regressions back to the model")
    max_file_bytes: int = Field(
        10 * 1024**2, ge=1, description="files above this are not committed (a tracked one keeps its base version)"
    )
    tool_output_chars: int = Field(20_000, ge=1_000, description="tool output shown to the model, head and tail kept")
    symbol_tools: bool = Field(True, description="find_symbol, rename_symbol, move_symbol (--symbol-tools on|off)")
    ledger: bool = Field(True, description="the state ledger and plan tools (--ledger on|off)")
    task_timeout_s: float | None = Field(None, gt=0, description="wall time of one task; then it is timed_out")
    max_tokens_per_task: int | None = Field(None, ge=1, description="prompt tokens processed plus tokens generated")
    author: str = Field(
        "refactor-agent ({model}) <refactor-agent@localhost>",
        description="the commits' author, `Name <email>`; {model} is the model the server runs (the user commits)",
    )


class NightConfig(BaseModel):
    """A night: every task of every repository, in order, in one run directory; written to runs/<id>/night.json
    (what `resume` reads). A one-repository `run` is a night of one entry."""

    repos: list[RunConfig] = Field(
        min_length=1, description="in order; a repository with per-task settings appears once per group of tasks"
    )
    runs_dir: Path = Path("runs")
    deadline_at: datetime | None = None
    min_task_time_s: float = Field(1200.0, ge=0, description="no task starts when less than this remains")
    on_finish: str | None = None
    night_file: Path | None = None
    allow_dirty: bool = False
    executor: Executor = Field("local", description="where tasks run: this machine, or the nodes of a Ray cluster")
    parallel: int = Field(1, ge=1, description="tasks at once on each server, each pinned to a slot of its own")
    ray_address: str | None = Field(None, description="the Ray cluster to join (--address); None: ray's default")

    def tasks(self) -> list[tuple[RunConfig, str]]:
        """(settings, task) pairs in order; the task index is the position + 1."""
        return [(config, task) for config in self.repos for task in config.tasks]

    def repositories(self) -> list[Path]:
        return list(dict.fromkeys(config.repo for config in self.repos))
