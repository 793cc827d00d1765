"""Resolved settings of a run; written verbatim to runs/<run-id>/config.json."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from agent.protocol.effort import Effort  # re-exported: agent.protocol.effort owns it
from agent.protocol.environment import EnvironmentSpec
from sandbox.models import DEFAULT_IMAGE

Executor = Literal["local", "ray"]
Switch = Literal["on", "off"]  # a feature's command-line switch, e.g. --ledger on|off

DEFAULT_SERVER_URL = "http://127.0.0.1:8080/v1"
RETRY_BACKOFF_CAP_S = 60.0  # the longest wait between two retries of a failing server
# Large models at long contexts save gigabytes per prefix (SmolLM2-135M: ~23 KB per token).
DEFAULT_PREFIX_CACHE_BYTES = 64 * 2**30
# A night's name shares the branch namespace refactor-agent/<name>/ with runs: it must not look like a run id.
RUN_ID_PATTERN = r"^\d{8}-\d{6}-[0-9a-f]{4}$"
# The night file's words for a task, checked where the file gives them and again in TaskSpec.
TaskId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
TaskKind = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9 _-]{0,31}$")]
ShardBy = Literal["directory", "codeowners"]
ShardDepth = Annotated[int, Field(ge=1, le=8)]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=200)]


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


class ContainsRule(BaseModel):
    """`if_contains = { glob = "*.py", pattern = "datetime.utcnow" }`: some file the glob names holds the literal
    pattern (literal: no regex engine runs on a repository's text)."""

    model_config = ConfigDict(extra="forbid")

    glob: ShortText
    pattern: ShortText


class RepoSelect(BaseModel):
    """A [[repo]]'s predicates, read from the default branch's git objects: a repository that does not match is
    skipped with the reason."""

    if_path_exists: str | None = Field(None, min_length=1, max_length=1000)
    if_contains: ContainsRule | None = None


class ShardRule(BaseModel):
    """`shard_by` and its details: one task becomes one task per directory (or per CODEOWNERS owner set)."""

    by: ShardBy
    depth: ShardDepth = 1
    paths: ShortText = Field("*", description="a glob: without a / it matches at any depth")
    contains: ShortText | None = Field(None, description="literal text the files hold")


class Shard(BaseModel):
    """One shard of a sharded task, computed at planning time from the default branch's objects
    (agent/nights/shards.py): its id (the task key's `#<id>`), what the plan and the record call it, the scope the
    model is given, and what the gate checks a changed path against (a directory, or the CODEOWNERS rules)."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=64)
    label: str  # `src/a/`, `@org/team-a @bob`
    scope: str  # appended to the task's words: "Only change files under src/a/."
    directory: str | None = None  # by directory: a changed path must be under it
    rules: list[str] = []  # by codeowners: every rule's pattern, in the file's order ...
    owned: list[int] = []  # ... and those of this owner set: a changed path's last matching rule must be one


class TaskSpec(BaseModel):
    """One task as the night file gives it: its identity across nights (`id`, else its words), its kind, whether
    it repeats on a new base once merged, and its shards. NightConfig.specs holds one per tasks() entry; a
    planned night's sharded task is one entry per shard, each with its `part`."""

    text: str = Field(min_length=1)
    id: TaskId | None = None
    kind: TaskKind | None = None
    repeat: bool = False
    shard: ShardRule | None = None
    max_open: int | None = Field(None, ge=1, description="a sharded task's shards waiting for review at once")
    part: Shard | None = None  # the shard this entry is (planned nights only)

    def prompt(self) -> str:
        """What the model is asked: the words, and a shard's scope after them."""
        return self.text if self.part is None else f"{self.text}\n\n{self.part.scope}"


class RetentionConfig(BaseModel):
    """The bounds of what grows every night (`refactor-agent gc`, and a night's end when after_night)."""

    keep_runs: int = Field(30, ge=1, description="finished run directories per runs directory")
    keep_history: int = Field(7, ge=1, description="history refs per task, and the nights its record keeps")
    keep_baselines_s: float = Field(14 * 86400.0, gt=0, description="baselines older than this are removed")
    keep_images: int = Field(3, ge=1, description="environment images per repository")
    prefix_cache_bytes: int = Field(DEFAULT_PREFIX_CACHE_BYTES, ge=1, description="saved prefixes, least recent out")
    after_night: bool = Field(True, description="a night applies the bounds at its end (gc = on|off)")


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
    suite_timeout_s: float = Field(
        3600.0,
        gt=0,
        description="the gate's run of the whole suite (baseline, check, re-runs): a real project's suite takes "
        "longer than any one command of the model's (Django's and typer's, on 2 shared cores, more than 600 s)",
    )
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
    before: list[str] = Field([], description="commands run in the sandbox before the model's work")
    after: list[str] = Field([], description="commands run in the sandbox before each gate check")
    select: RepoSelect | None = Field(None, description="the [[repo]]'s predicates (a night file's)")
    shard: Shard | None = Field(
        None, description="the shard a planned night's task is: the gate refuses a change outside its scope"
    )
    compact_at: float = Field(
        0.85,
        gt=0,
        le=1,
        description="share of the server's window past which the conversation is compacted instead of overflowing",
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
    name: str | None = Field(
        None, description="a night file's name: its tasks keep their branches across nights; None: a one-off run"
    )
    specs: list[TaskSpec] = Field([], description="a night file's tasks as it gives them; one per tasks() entry")
    retention: RetentionConfig = RetentionConfig()

    @model_validator(mode="after")
    def _specs_are_the_tasks(self) -> NightConfig:
        if self.specs and [spec.prompt() for spec in self.specs] != [task for _, task in self.tasks()]:
            raise ValueError("specs: one per task, in the order of tasks()")
        return self

    def tasks(self) -> list[tuple[RunConfig, str]]:
        """(settings, task) pairs in order; the task index is the position + 1."""
        return [(config, task) for config in self.repos for task in config.tasks]

    def repositories(self) -> list[Path]:
        return list(dict.fromkeys(config.repo for config in self.repos))
