"""The night file: every task of every repository for one night, checked completely before anything starts.

    [defaults]            # any option of `run`: server, model, max_turns, test_cmd, until, deadline ...
    until = "06:30"
    [[repo]]
    path = "/srv/repos/billing"
    test_cmd = "pytest -q"
    tasks = ["Replace the deprecated datetime.utcnow() calls"]
    [[repo.task]]         # a task with settings of its own
    text = "Move the date helpers into dates.py"
    max_turns = 60

Settings of the whole night (server, model, until, runs_dir ...) belong in [defaults]; a repository or a task
sets only what can differ per task.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agent.protocol.config import NightConfig
from agent.settings.layers import (
    ConfigFiles,
    Layer,
    SettingsError,
    Source,
    describe,
    night_config,
    read_toml,
)
from agent.settings.options import NIGHT_WIDE, Options


def _per_task_only(values: dict[str, Any]) -> dict[str, Any]:
    wide = sorted(key for key in values if key in NIGHT_WIDE)
    if wide:
        raise ValueError(f"{wide[0]} is a setting of the whole night: put it in [defaults]")
    return values


class TaskEntry(Options):
    text: str = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _local(cls, values: Any) -> Any:
        return _per_task_only(values) if isinstance(values, dict) else values


class RepoEntry(Options):
    path: Path
    tasks: list[str] = Field(default_factory=list)
    task: list[TaskEntry] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _local(cls, values: Any) -> Any:
        return _per_task_only(values) if isinstance(values, dict) else values

    @model_validator(mode="after")
    def _has_tasks(self) -> RepoEntry:
        if not [text for text in self.tasks if text.strip()] and not self.task:
            raise ValueError("no tasks: give tasks = [...] or [[repo.task]] tables")
        return self


class NightFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    defaults: Options = Options()
    repo: list[RepoEntry] = Field(min_length=1)


def _option_values(entry: Options) -> dict[str, Any]:
    return {key: getattr(entry, key) for key in entry.model_fields_set if key in Options.model_fields}


def _read(path: Path) -> NightFile:
    try:
        return NightFile.model_validate(read_toml(path))
    except ValidationError as error:
        raise SettingsError(describe(error, Source(str(path), path))) from None


def _defaults(path: Path, night: NightFile) -> Layer:
    return Layer(Source(f"{path} [defaults]", path, ("defaults",)), _option_values(night.defaults))


def night_defaults(path: Path) -> Layer:
    """The [defaults] of a night file, checked (for `config show`)."""
    path = path.absolute()
    return _defaults(path, _read(path))


def load_night(
    path: Path, config_files: ConfigFiles, command_line: Layer, *, log: Callable[[str], None]
) -> NightConfig:
    """The night file on top of the config files, under the command line. Raises SettingsError. `log` gets the
    lines that say a config file was not read or the runs directory moved (agent/settings/layers.py)."""
    path = path.absolute()
    night = _read(path)
    defaults = _defaults(path, night)
    repositories = [_repository(path, number, repo.path) for number, repo in enumerate(night.repo)]
    for number, repo_path in enumerate(repositories):
        if repo_path in repositories[:number]:
            where = Source(str(path), path, ("repo", number, "path"))
            raise SettingsError(
                f"{where.where()}: repo.{number}.path: {repo_path} is listed twice (also "
                f"repo.{repositories.index(repo_path)}): give one [[repo]] all its tasks"
            )
    # The config files after the repositories: a directory's file inside one of them is not the user's.
    base = config_files.layers(repositories, log)
    night_layers = [*base, defaults, command_line]
    entries = []
    for number, (repo, repo_path) in enumerate(zip(night.repo, repositories, strict=True)):
        repo_layer = Layer(Source(f"{path} [[repo]] {number}", path, ("repo", number)), _option_values(repo))
        plain = [text.strip() for text in repo.tasks if text.strip()]
        if plain:
            entries.append((repo_path, plain, [*base, defaults, repo_layer, command_line]))
        for index, task in enumerate(repo.task):
            task_source = Source(f"{path} [[repo.task]] {number}.{index}", path, ("repo", number, "task", index))
            task_layer = Layer(task_source, _option_values(task))
            entries.append((repo_path, [task.text.strip()], [*base, defaults, repo_layer, task_layer, command_line]))
    return night_config(entries, night_layers, night_file=path, directory=config_files.directory, log=log)


def _repository_path(night_file: Path, given: Path) -> Path:
    return (night_file.parent / given.expanduser()).resolve()  # relative to the night file's folder


def _repository(night_file: Path, number: int, given: Path) -> Path:
    """A [[repo]]'s path, checked to be a directory."""
    repo_path = _repository_path(night_file, given)
    if not repo_path.is_dir():
        where = Source(str(night_file), night_file, ("repo", number, "path"))
        raise SettingsError(f"{where.where()}: repo.{number}.path: {repo_path} is not a directory")
    return repo_path


def night_repositories(path: Path) -> list[Path]:
    """The repositories a night file names, there or not (for `config show --night`)."""
    path = path.absolute()
    return [_repository_path(path, repo.path) for repo in _read(path).repo]
