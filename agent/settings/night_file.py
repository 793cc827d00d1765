"""The night file: every task of every repository for one night, checked completely before anything starts.

    name = "nightly"      # its tasks' branches: refactor-agent/nightly/<task> (default: the file's name)
    [defaults]            # any option of `run`: server, model, max_turns, test_cmd, until, deadline ...
    until = "06:30"
    [[repo]]
    path = "/srv/repos/billing"
    test_cmd = "pytest -q"
    if_path_exists = "setup.cfg"   # or if_contains = { glob = "*.py", pattern = "utcnow" }
    tasks = ["Replace the deprecated datetime.utcnow() calls"]
    [[repo.task]]         # a task with settings of its own
    text = "Move the date helpers into dates.py"
    id = "date-helpers"   # its identity across nights (default: its words), so that the words may change
    kind = "move"         # for the merge rate per kind (default: guessed from the words)
    repeat = false        # true: runs again on the new base after its branch was merged
    shard_by = "directory"  # one branch per directory (shard_depth, shard_paths, shard_contains), or "codeowners"
    max_open = 2          # at most this many of its shards wait for review at once
    max_turns = 60

Settings of the whole night (server, model, until, runs_dir ...) belong in [defaults]; a repository or a task
sets only what can differ per task.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, model_validator

from agent.nights.identity import task_key
from agent.protocol.config import (
    RUN_ID_PATTERN,
    ContainsRule,
    NightConfig,
    RepoSelect,
    ShardBy,
    ShardDepth,
    ShardRule,
    ShortText,
    TaskId,
    TaskKind,
    TaskSpec,
)
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
from agent.worktree.workspace import task_slug

_SHARD_DETAILS = ("shard_depth", "shard_paths", "shard_contains", "max_open")


def _per_task_only(values: dict[str, Any]) -> dict[str, Any]:
    wide = sorted(key for key in values if key in NIGHT_WIDE)
    if wide:
        raise ValueError(f"{wide[0]} is a setting of the whole night: put it in [defaults]")
    return values


class TaskEntry(Options):
    text: str = Field(min_length=1)
    id: TaskId | None = None
    kind: TaskKind | None = None
    repeat: bool = False
    shard_by: ShardBy | None = None
    shard_depth: ShardDepth | None = None
    shard_paths: ShortText | None = None
    shard_contains: ShortText | None = None
    max_open: PositiveInt | None = None

    @model_validator(mode="before")
    @classmethod
    def _local(cls, values: Any) -> Any:
        return _per_task_only(values) if isinstance(values, dict) else values

    @model_validator(mode="after")
    def _shard_details_need_shard_by(self) -> TaskEntry:
        given = next((name for name in _SHARD_DETAILS if getattr(self, name) is not None), None)
        if given is not None and self.shard_by is None:
            raise ValueError(f'{given} is a detail of shard_by: give shard_by = "directory" or "codeowners"')
        return self

    def spec(self) -> TaskSpec:
        shard = None
        if self.shard_by is not None:
            details = {"depth": self.shard_depth, "paths": self.shard_paths, "contains": self.shard_contains}
            shard = ShardRule(by=self.shard_by, **{key: value for key, value in details.items() if value is not None})
        return TaskSpec(
            text=self.text.strip(), id=self.id, kind=self.kind, repeat=self.repeat, shard=shard, max_open=self.max_open
        )


class RepoEntry(Options):
    path: Path
    tasks: list[str] = Field(default_factory=list)
    task: list[TaskEntry] = Field(default_factory=list)
    if_path_exists: ShortText | None = None
    if_contains: ContainsRule | None = None

    @model_validator(mode="before")
    @classmethod
    def _local(cls, values: Any) -> Any:
        return _per_task_only(values) if isinstance(values, dict) else values

    @model_validator(mode="after")
    def _has_tasks(self) -> RepoEntry:
        if not [text for text in self.tasks if text.strip()] and not self.task:
            raise ValueError("no tasks: give tasks = [...] or [[repo.task]] tables")
        return self

    def select(self) -> RepoSelect | None:
        if self.if_path_exists is None and self.if_contains is None:
            return None
        return RepoSelect(if_path_exists=self.if_path_exists, if_contains=self.if_contains)


class NightFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: ShortText | None = None
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


def _one_key_each(path: Path, name: str, number: int, repo: RepoEntry, specs: list[TaskSpec]) -> None:
    """Two entries of one repository that are the same task (the same words, or the same id) would share one
    branch and one record: refused where the second is written."""
    plain = [("tasks", index) for index, text in enumerate(repo.tasks) if text.strip()]
    places = [*plain, *(("task", index) for index in range(len(repo.task)))]
    seen: dict[str, str] = {}
    for (table, index), spec in zip(places, specs, strict=True):
        key, here = task_key(name, spec), f"repo.{number}.{table}.{index}"
        if key in seen:
            where = Source(str(path), path, ("repo", number, table, index)).where()
            raise SettingsError(f"{where}: {here}: the same task as {seen[key]} (give one an id)")
        seen[key] = here


def _night_name(path: Path, night: NightFile) -> str:
    """The night's name: `name`, else the file's, as a branch name's part (`[a-z0-9-]`)."""
    name = task_slug(night.name or path.stem)
    if re.match(RUN_ID_PATTERN, name):
        where = Source(str(path), path, ("name",) if night.name else ()).where()
        raise SettingsError(
            f"{where}: name: {name!r} looks like a run id, whose branches are refactor-agent/<run-id>/...: "
            'set name = "..." to another name'
        )
    return name


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
    name = _night_name(path, night)
    entries, specs = [], []
    for number, (repo, repo_path) in enumerate(zip(night.repo, repositories, strict=True)):
        repo_layer = Layer(Source(f"{path} [[repo]] {number}", path, ("repo", number)), _option_values(repo))
        plain = [text.strip() for text in repo.tasks if text.strip()]
        if plain:
            entries.append((repo_path, plain, [*base, defaults, repo_layer, command_line]))
            specs += [TaskSpec(text=text) for text in plain]
        for index, task in enumerate(repo.task):
            task_source = Source(f"{path} [[repo.task]] {number}.{index}", path, ("repo", number, "task", index))
            task_layer = Layer(task_source, _option_values(task))
            entries.append((repo_path, [task.text.strip()], [*base, defaults, repo_layer, task_layer, command_line]))
            specs.append(task.spec())
        _one_key_each(path, name, number, repo, specs[len(specs) - len(plain) - len(repo.task) :])
    config = night_config(
        entries, night_layers, night_file=path, name=name, specs=specs, directory=config_files.directory, log=log
    )
    selects = {repo_path: repo.select() for repo, repo_path in zip(night.repo, repositories, strict=True)}
    return config.model_copy(
        update={"repos": [entry.model_copy(update={"select": selects[entry.repo]}) for entry in config.repos]}
    )


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


def night_claim(path: Path) -> tuple[str, list[Path]]:
    """The night's name and the repositories it names, as the file reads now (the file that claimed a night name
    on a repository: agent/nights/claim.py). Raises SettingsError."""
    path = path.absolute()
    night = _read(path)
    return _night_name(path, night), [_repository_path(path, repo.path) for repo in night.repo]
