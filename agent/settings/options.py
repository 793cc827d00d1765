"""Every option of `run`, `night`, `resume` and `eval`, declared once: its name (the command line's word and the
settings files' key), its type, help, scope (the whole night, or per repository and task), the commands that take
it, and where it lands in the settings models, which own its default.

Derived from the table, nothing listed by hand elsewhere: the layers' model (`Options`), the night-wide set, where
each value goes in RunConfig and NightConfig, each command's signature (`takes_options`), `config show`'s rows and
defaults. tests/settings/test_options.py proves they agree.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from agent.environment.spec import load_environment_file
from agent.protocol.config import DEFAULT_SERVER_URL, Effort, Executor, NightConfig, RunConfig, Switch
from agent.settings.durations import parse_duration, parse_until
from agent.worktree.workspace import author_identity
from sandbox.models import DEFAULT_IMAGE

MIB = 1024**2
GIB = 1024**3
Command = Literal["run", "night", "resume", "eval", "gc"]
RUN: frozenset[Command] = frozenset({"run"})
EVERY_RUN: frozenset[Command] = frozenset({"run", "eval"})  # eval runs each task of its suite as `run` would
NIGHTS: frozenset[Command] = frozenset({"run", "night"})
ENDS: frozenset[Command] = frozenset({"run", "night", "resume"})
FILES_ONLY: frozenset[Command] = frozenset()
RETENTION: frozenset[Command] = frozenset({"night", "gc"})  # what grows every night: bounded by a night and by gc
# A run's settings and a night's, at their defaults: where the table reads each option's default.
_DEFAULT_RUN = RunConfig(repo=Path("."), tasks=["-"])
_DEFAULT_NIGHT = NightConfig(repos=[_DEFAULT_RUN])


def _identity(value: Any) -> Any:
    return value


def _switch(enabled: bool) -> Switch:
    return "on" if enabled else "off"


@dataclass(frozen=True)
class Option:
    name: str
    type: Any  # as the command line takes it
    help: str | None
    scope: Literal["night", "task"]  # night: one value for the whole night ([defaults] of a night file only)
    commands: frozenset[Command]
    run: tuple[str, ...] | None = None  # where it lands in RunConfig (a path of fields)
    night: str | None = None  # where it lands in NightConfig: a field, or a dotted path (retention.keep_runs)
    convert: Callable[[Any], Any] = _identity  # the value as the settings models take it
    back: Callable[[Any], Any] = _identity  # the models' default as the command line shows it
    shown_default: bool = False  # the command line's default is the models' (else None: unset, files may set it)
    layer: Any = None  # what a settings file may give, when more than the command line takes (e.g. a number)
    click: Mapping[str, Any] = field(default_factory=dict)  # more of typer.Option (min=1)
    example: Any = None  # a valid value, for the table's tests
    metavar: str | None = None  # help's word for the value when its type says too little (URL, HH:MM)

    @property
    def night_path(self) -> tuple[str, ...]:
        return tuple((self.night or self.name).split("."))

    def model_default(self) -> Any:
        """The settings models' own default, as they hold it."""
        value: Any = _DEFAULT_RUN if self.run is not None else _DEFAULT_NIGHT
        for part in self.run or self.night_path:
            value = getattr(value, part)
        return value

    @property
    def default(self) -> Any:
        """The command line's default: the settings models' own, as the command line writes it, or None."""
        return self.back(self.model_default()) if self.shown_default else None

    def parameter(self) -> inspect.Parameter:
        """The option as a parameter of a command's signature (typer reads it)."""
        metavar = {"metavar": self.metavar} if self.metavar else {}
        annotation = Annotated[self.type, typer.Option(help=self.help, **metavar, **self.click)]
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY, default=self.default, annotation=annotation)


def _count_bound(name: str, help: str, *, example: int) -> Option:
    """A retention bound that counts what is kept (runs, history refs, images): at least one."""
    return Option(
        name,
        int,
        help,
        "night",
        RETENTION,
        night=f"retention.{name}",
        shown_default=True,
        layer=Annotated[int, Field(ge=1)],
        click={"min": 1},
        example=example,
    )


def _options() -> tuple[Option, ...]:
    task_settings = frozenset({"run", "eval"})
    return (
        Option(
            "server",
            list[str] | None,
            f"OpenAI-compatible base URL (default: {DEFAULT_SERVER_URL}); repeat for a fleet: tasks in parallel.",
            "night",
            frozenset({"run", "night", "eval"}),
            run=("llm", "servers"),
            example=["http://127.0.0.1:8080/v1"],
            metavar="URL",
        ),
        Option(
            "executor",
            Executor | None,
            "local: here (default); ray: each task on a Ray node labelled refactor-agent.",
            "night",
            NIGHTS,
            night="executor",
            example="local",
        ),
        Option(
            "address",
            str | None,
            "The Ray cluster to join (--executor ray; default: Ray's).",
            "night",
            NIGHTS,
            night="ray_address",
            example="127.0.0.1:6379",
            metavar="HOST:PORT",
        ),
        Option(
            "parallel",
            int | None,
            "Tasks at once on each server, each in a slot of its own (server start --parallel N).",
            "night",
            NIGHTS,
            night="parallel",
            layer=Annotated[int, Field(ge=1)],
            click={"min": 1},
            example=2,
        ),
        Option(
            "model",
            str,
            "Model name sent to the server.",
            "night",
            task_settings,
            run=("llm", "model"),
            shown_default=True,
            example="smol",
        ),
        Option(
            "effort",
            Effort,
            "Reasoning effort.",
            "night",
            task_settings,
            run=("llm", "effort"),
            shown_default=True,
            example="high",
        ),
        Option(
            "temperature",
            float,
            None,
            "night",
            task_settings,
            run=("llm", "sampling", "temperature"),
            shown_default=True,
            example=0.5,
        ),
        Option(
            "top_p",
            float,
            None,
            "night",
            task_settings,
            run=("llm", "sampling", "top_p"),
            shown_default=True,
            example=0.9,
        ),
        Option(
            "min_p",
            float,
            None,
            "night",
            task_settings,
            run=("llm", "sampling", "min_p"),
            shown_default=True,
            example=0.1,
        ),
        Option(
            "seed",
            int | None,
            "Sampling seed (reproducible runs).",
            "night",
            task_settings,
            run=("llm", "sampling", "seed"),
            example=7,
        ),
        Option(
            "max_tokens",
            int | None,
            "Cap per response (default: the server's).",
            "night",
            task_settings,
            run=("llm", "sampling", "max_tokens"),
            example=512,
        ),
        Option(
            "max_retries",
            int,
            "Retries of a failing server, backoff from 2 s.",
            "night",
            task_settings,
            run=("llm", "max_retries"),
            shown_default=True,
            example=1,
        ),
        Option(
            "idle_timeout",
            float,
            "Seconds of silence from the server (no token, no prefill progress) before a retry.",
            "night",
            task_settings,
            run=("llm", "idle_timeout_s"),
            shown_default=True,
            example=30.0,
        ),
        Option(
            "image",
            str | None,
            f"Sandbox image, used as is (default: the repository's environment on {DEFAULT_IMAGE})",
            "task",
            task_settings,
            run=("image",),
            example="python:3.12-slim",
            metavar="IMAGE",
        ),
        Option(
            "environment",
            Path | None,
            "TOML file whose [environment] table describes the environment.",
            "task",
            task_settings,
            run=("environment",),
            convert=load_environment_file,
            metavar="FILE",
        ),
        Option(
            "allowed_base_images",
            list[str] | None,
            None,
            "task",
            FILES_ONLY,
            run=("allowed_base_images",),
            example=["mcr.microsoft.com/devcontainers/python:3.12"],
        ),
        Option(
            "runs_dir",
            Path,
            "Where run records go; never inside a repository of the run (the default moves to the per-user folder).",
            "night",
            frozenset({"run", "night", "eval"}),
            run=("runs_dir",),
            night="runs_dir",
            shown_default=True,
            example="records",
            metavar="DIR",
        ),
        Option(
            "max_turns",
            int,
            "Model turns per task.",
            "task",
            task_settings,
            run=("max_turns",),
            shown_default=True,
            example=7,
        ),
        Option(
            "test_cmd",
            str | None,
            "Test command (default: detected).",
            "task",
            task_settings,
            run=("test_cmd",),
            example="python -m pytest -q",
            metavar="COMMAND",
        ),
        Option(
            "command_timeout",
            float,
            "Seconds before a sandbox command is killed.",
            "task",
            task_settings,
            run=("command_timeout_s",),
            shown_default=True,
            example=60.0,
        ),
        Option(
            "suite_timeout",
            float,
            "Seconds before the gate's run of the test suite is killed (baseline, check, re-runs).",
            "task",
            task_settings,
            run=("suite_timeout_s",),
            shown_default=True,
            example=1800.0,
        ),
        Option(
            "repair_rounds",
            int,
            "Times the gate sends regressed tests back to the model.",
            "task",
            task_settings,
            run=("repair_rounds",),
            shown_default=True,
            example=1,
        ),
        Option(
            "max_file_size",
            int,
            "MiB; larger files are not committed, new or grown (listed in summary.json).",
            "task",
            task_settings,
            run=("max_file_bytes",),
            convert=lambda mib: mib * MIB,
            back=lambda size: size // MIB,
            shown_default=True,
            example=3,
            metavar="MIB",
        ),
        Option(
            "symbol_tools",
            Switch,
            "find_symbol, rename_symbol and move_symbol for the model.",
            "task",
            task_settings,
            run=("symbol_tools",),
            convert=lambda switch: switch == "on",
            back=_switch,
            shown_default=True,
            example="off",
        ),
        Option(
            "ledger",
            Switch,
            "The state ledger after each edit, and the plan tools.",
            "task",
            task_settings,
            run=("ledger",),
            convert=lambda switch: switch == "on",
            back=_switch,
            shown_default=True,
            example="off",
        ),
        Option(
            "task_timeout",
            str | None,
            "Wall time of one task (90m); then it is timed_out.",
            "task",
            task_settings,
            run=("task_timeout_s",),
            convert=parse_duration,
            layer=str | float,
            example="90m",
            metavar="DURATION",
        ),
        Option(
            "before",
            list[str] | None,
            "A command run in the sandbox before the model's work (a codemod); repeatable; its changes are gated.",
            "task",
            NIGHTS,
            run=("before",),
            example=["python -m black ."],
        ),
        Option(
            "after",
            list[str] | None,
            "A command run in the sandbox before each test of the work (a formatter); repeatable.",
            "task",
            NIGHTS,
            run=("after",),
            example=["ruff check --fix ."],
        ),
        Option(
            "max_tokens_per_task",
            int | None,
            "Tokens one task may spend (prompt processed + generated).",
            "task",
            task_settings,
            run=("max_tokens_per_task",),
            example=100_000,
        ),
        Option(
            "compact_at",
            float,
            "Share of the server's window past which the conversation is compacted instead of overflowing.",
            "task",
            task_settings,
            run=("compact_at",),
            shown_default=True,
            example=0.7,
        ),
        # until and deadline land in NightConfig.deadline_at together (deadline_at() in layers.py).
        Option(
            "until",
            str | None,
            "End time: HH:MM (its next occurrence, local time) or a date and time.",
            "night",
            ENDS,
            example="06:30",
            metavar="HH:MM",
        ),
        Option(
            "deadline",
            str | None,
            "End after this long: 45s, 90m, 5h.",
            "night",
            ENDS,
            layer=str | float,
            example="5h",
            metavar="DURATION",
        ),
        Option(
            "min_task_time",
            str | None,
            "No task starts when less than this remains before the end (default: 20m).",
            "night",
            NIGHTS,
            night="min_task_time_s",
            convert=parse_duration,
            layer=str | float,
            example="10m",
            metavar="DURATION",
        ),
        Option(
            "on_finish",
            str | None,
            "Shell command run after the run; $REFACTOR_AGENT_REPORT is the report's path.",
            "night",
            NIGHTS,
            night="on_finish",
            example="true",
            metavar="COMMAND",
        ),
        _count_bound("keep_runs", "Finished run records kept in the runs directory (refactor-agent gc).", example=10),
        _count_bound("keep_history", "Earlier results kept per night task, as private history refs.", example=3),
        Option(
            "keep_baselines",
            str | None,
            "Cached test baselines older than this are removed (default: 14d).",
            "night",
            RETENTION,
            night="retention.keep_baselines_s",
            convert=parse_duration,
            layer=str | float,
            example="7d",
        ),
        _count_bound("keep_images", "Environment images kept per repository.", example=2),
        Option(
            "prefix_cache_gib",
            int,
            "GiB of saved prompt prefixes kept, least recently used removed first.",
            "night",
            RETENTION,
            night="retention.prefix_cache_bytes",
            convert=lambda gib: gib * GIB,
            back=lambda size: size // GIB,
            shown_default=True,
            layer=Annotated[int, Field(ge=1)],
            click={"min": 1},
            example=16,
        ),
        Option(
            "gc",
            Switch,
            "Apply the bounds above at the end of the night.",
            "night",
            frozenset({"night"}),
            night="retention.after_night",
            convert=lambda switch: switch == "on",
            back=_switch,
            shown_default=True,
            example="off",
        ),
        Option(
            "author",
            str | None,
            'The commits\' author, "Name <email>"; {model} is the model the server runs (you stay the committer).',
            "night",
            NIGHTS,
            run=("author",),
            metavar="TEXT",
            example="bot ({model}) <bot@example.com>",
        ),
        Option(
            "allow_dirty",
            bool,
            "Run although REPO has uncommitted changes (they are ignored).",
            "night",
            RUN,
            night="allow_dirty",
            shown_default=True,
            example=True,
        ),
    )


OPTIONS: tuple[Option, ...] = _options()
BY_NAME: dict[str, Option] = {option.name: option for option in OPTIONS}
# Settings of the whole night (one set of servers, one end time, one run directory): not per repository or task.
NIGHT_WIDE = frozenset(option.name for option in OPTIONS if option.scope == "night")


def command_options(command: Command) -> list[Option]:
    return [option for option in OPTIONS if command in option.commands]


def takes_options(command: Command) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A command's signature: its own parameters, then each option the table gives `command` (the function takes
    them as **options). typer reads the signature, so each option keeps one definition here."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        own = inspect.signature(function, eval_str=True).parameters.values()
        parameters = [parameter for parameter in own if parameter.kind is not inspect.Parameter.VAR_KEYWORD]
        parameters += [option.parameter() for option in command_options(command)]
        function.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        return function

    return decorate


class _Checks(BaseModel):
    """What a layer checks beyond each option's type."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("server", mode="before", check_fields=False)
    @classmethod
    def _servers(cls, value: str | list[str] | None) -> list[str] | None:
        """`server = "URL"` or, for a fleet, `server = ["URL", "URL"]` (the command line: --server repeated)."""
        servers = [value] if isinstance(value, str) else value
        if servers is not None and not servers:
            raise ValueError("give at least one URL")
        return servers

    @field_validator("task_timeout", "deadline", "min_task_time", "keep_baselines", mode="before", check_fields=False)
    @classmethod
    def _duration(cls, value: str | float | None) -> str | float | None:
        if value is not None:
            parse_duration(value)
        return value

    @field_validator("author", check_fields=False)
    @classmethod
    def _author(cls, value: str | None) -> str | None:
        if value is not None:
            author_identity(value, "model")
        return value

    @field_validator("until", check_fields=False)
    @classmethod
    def _until(cls, value: str | None) -> str | None:
        if value is not None:
            parse_until(value)
        return value


def _layer_type(option: Option) -> Any:
    return (option.layer if option.layer is not None else option.type) | None


# The options as a settings file or the command line gives them; None: not set there.
Options: type[BaseModel] = create_model(
    "Options",
    __base__=_Checks,
    **{option.name: (_layer_type(option), None) for option in OPTIONS},  # type: ignore[call-overload]
)
# Where each per-repository option goes in RunConfig, and each night-wide one in NightConfig, with its conversion.
RUN_FIELDS: dict[str, tuple[tuple[str, ...], Callable[[Any], Any]]] = {
    option.name: (option.run, option.convert) for option in OPTIONS if option.run is not None
}
NIGHT_FIELDS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    option.name: (option.night, option.convert) for option in OPTIONS if option.night is not None
}
