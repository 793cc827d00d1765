"""Settings in layers: built-in defaults < the user's config file < ./refactor-agent.toml < --config FILE < night
file < command line.

Every layer speaks the command line's words (`max_turns`, `server`, `until` ...), checked by one pydantic model,
and remembers where each value came from (a file and the TOML key's location in it), so that an error names the
file, the line and the key, and `config show` can say where each setting was set.

Configuration is the user's, never a repository's: ./refactor-agent.toml is read only when the current directory
lies outside every repository the command works on. After `cd repo && refactor-agent run .` that file is the
repository's own, committed by anyone, and it could name `on_finish` (a host command), `server` (where the packed
repository is sent), `image`, `environment`, `allow_dirty` or `test_cmd`.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.protocol.config import NightConfig, RetentionConfig, RunConfig, TaskSpec
from agent.settings.durations import parse_duration, parse_until
from agent.settings.options import BY_NAME, NIGHT_FIELDS, RUN_FIELDS, Options
from agent.settings.runs_dir import user_runs_dir

CONFIG_FILE_NAME = "refactor-agent.toml"
# Bounded read: a settings file of more than this is not one.
MAX_SETTINGS_BYTES = 1024**2


@dataclass(frozen=True)
class Source:
    """Where a value was set: `label` for people; a file and the key's location in it when it came from one."""

    label: str
    path: Path | None = None
    location: tuple[str | int, ...] = ()

    def where_key(self, option: str) -> str:
        """Where `option` was set in this source: the file and the line of its key."""
        return Source(self.label, self.path, (*self.location, option)).where()

    def where(self) -> str:
        if self.path is None:
            return self.label
        line = key_line(_read_text(self.path), self.location)
        return f"{self.path}:{line}" if line else str(self.path)


@dataclass
class Layer:
    source: Source
    values: dict[str, Any]  # option -> value, only those set


class SettingsError(Exception):
    """One line: the file, the line and the key, what is wrong."""


def _read_text(path: Path) -> str:
    with path.open("rb") as file:
        return file.read(MAX_SETTINGS_BYTES).decode("utf-8", errors="replace")


def read_toml(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()[: MAX_SETTINGS_BYTES + 1]
    except OSError as error:
        raise SettingsError(f"{path}: cannot read it: {error.strerror}") from None
    if len(data) > MAX_SETTINGS_BYTES:
        raise SettingsError(f"{path}: larger than {MAX_SETTINGS_BYTES} bytes, not a settings file")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise SettingsError(f"{path}: not UTF-8 text (byte {error.start})") from None
    except tomllib.TOMLDecodeError as error:
        raise SettingsError(f"{path}: not valid TOML: {error}") from None


def _header(line: str) -> str | None:
    """The table name of a `[name]` or `[[name]]` header line, else None."""
    stripped = line.split("#", 1)[0].strip()
    if not stripped.startswith("[") or not stripped.endswith("]") or "=" in stripped:
        return None
    return stripped.strip("[]").strip()


def key_line(text: str, location: tuple[str | int, ...]) -> int | None:
    """The line (1-based) of a key given as pydantic locates it in the parsed TOML: ("defaults", "max_turns"),
    ("repo", 1, "tasks", 0), ("repo", 0, "task", 2, "max_turns"). Tables are found by their headers, arrays of
    tables by counting; the table's header line when the key itself is not written out, None for the top."""
    lines = text.splitlines()
    headers = [(number, _header(line)) for number, line in enumerate(lines)]
    headers = [(number, name) for number, name in headers if name is not None]
    start, end, table = -1, len(lines), ""
    parts = list(location)
    while parts:
        part = parts.pop(0)
        if isinstance(part, int):
            continue
        name = f"{table}.{part}" if table else part
        inside = [number for number, header in headers if header == name and start < number < end]
        if inside:
            index = parts.pop(0) if parts and isinstance(parts[0], int) else 0
            start = inside[min(index, len(inside) - 1)]
            later = [n for n, header in headers if n > start and not header.startswith(name + ".")]
            end, table = min([*later, end]), name
            continue
        keys_end = min([n for n, _ in headers if n > start] + [end])
        for number in range(start + 1, keys_end):
            key = lines[number].split("=", 1)[0].strip().strip('"')
            if "=" in lines[number] and key == part:
                return number + 1
        break
    return start + 1 if start >= 0 else None


def options_from(table: dict[str, Any], source: Source) -> Layer:
    """A table of options, checked: unknown keys and wrong types are named by file, line and key."""
    try:
        options = Options.model_validate(table)
    except ValidationError as error:
        raise SettingsError(describe(error, source)) from None
    return Layer(source, options.model_dump(exclude_unset=True))


def describe(error: ValidationError, source: Source) -> str:
    detail = error.errors()[0]
    location = (*source.location, *detail["loc"])
    key = ".".join(str(part) for part in location)
    text = str(detail["ctx"]["error"]) if detail["type"] == "value_error" else detail["msg"]
    if detail["type"] == "extra_forbidden":
        text = "unknown key"
    where = Source(source.label, source.path, location).where()
    more = f" (and {len(error.errors()) - 1} more)" if len(error.errors()) > 1 else ""
    return f"{where}: {key}: {text[:1].lower() + text[1:]}{more}"


def user_config_file() -> Path:
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config_home / "refactor-agent" / "config.toml"


def enclosing_repository(path: Path, repositories: Iterable[Path]) -> Path | None:
    """The repository among `repositories` whose work tree holds `path` (symbolic links resolved), if any."""
    resolved = path.resolve()
    for repository in repositories:
        root = repository.resolve()
        if resolved == root or root in resolved.parents:
            return root
    return None


def _file_layer(path: Path) -> Layer:
    return options_from(read_toml(path), Source(str(path), path))


@dataclass(frozen=True)
class ConfigFiles:
    """The config files a command reads, lowest first: the user's own, ./refactor-agent.toml of `directory` (the
    current one) unless it lies inside a repository the command works on, then an explicit --config FILE."""

    explicit: Path | None = None
    directory: Path | None = None

    def layers(self, repositories: Iterable[Path], log: Callable[[str], None]) -> list[Layer]:
        """The files' layers for a command on `repositories`; `log` gets the one line that says a directory's
        file was not read."""
        layers = [_file_layer(path) for path in [user_config_file()] if path.is_file()]
        local = (self.directory or Path.cwd()) / CONFIG_FILE_NAME
        if local.is_file():
            inside = enclosing_repository(local.parent, repositories)
            if inside is None:
                layers.append(_file_layer(local))
            else:
                log(
                    f"note: {local} is not read: it lies inside {inside}, a repository this run works on "
                    f"(settings come from {user_config_file()}, --config FILE, the night file, the command line)"
                )
        if self.explicit is not None:
            layers.append(_file_layer(self.explicit))
        return layers


def user_setting(option: str, repositories: Iterable[Path], log: Callable[[str], None]) -> Any:
    """One option as the user's config files set it (None if they do not), for a command on `repositories` that
    takes no settings layers of its own (`env build`, `doctor --repo`): a file inside one of them is not read."""
    values, _ = merged(ConfigFiles().layers(repositories, log))
    return values.get(option)


def merged(layers: list[Layer]) -> tuple[dict[str, Any], dict[str, Source]]:
    values: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    for layer in layers:
        for option, value in layer.values.items():
            values[option], sources[option] = value, layer.source
    return values, sources


def _set(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        target = target.setdefault(part, {})
    target[path[-1]] = value


def run_config(repo: Path, tasks: list[str], layers: list[Layer]) -> RunConfig:
    """RunConfig from the layers; a value RunConfig refuses is named where it was set."""
    values, sources = merged(layers)
    if values.get("image") is not None and values.get("environment") is not None:
        raise SettingsError("--image and --environment: an explicit image is used as is, choose one")
    fields: dict[str, Any] = {"repo": repo, "tasks": tasks}
    for option, value in values.items():
        if option in RUN_FIELDS and value is not None:
            path, convert = RUN_FIELDS[option]
            _set(fields, path, convert(value))
    if "server" in values:
        _set(fields, ("llm", "server_explicit"), True)
    if values.get("image") is not None:
        fields["image_explicit"] = True
    try:
        return RunConfig.model_validate(fields)
    except ValidationError as error:
        raise SettingsError("; ".join(_refusal(detail, sources) for detail in error.errors())) from None


def _refusal(detail: Any, sources: dict[str, Source]) -> str:
    """One complaint of RunConfig's in the words of where the value was set: `--max-turns 0: ...` for the
    command line, `night.toml:7: max_turns 0: ...` for a file."""
    field = next((str(part) for part in reversed(detail["loc"]) if isinstance(part, str)), "")
    option = next((name for name, (path, _) in RUN_FIELDS.items() if path[-1] == field), field)
    # A validator's own ValueError reads as its text; pydantic's "Value error, " prefix says nothing more.
    text = str(detail["ctx"]["error"]) if detail["type"] == "value_error" else detail["msg"]
    return f"{_named(option, sources.get(option, Source('default')))} {detail['input']}: {text[:1].lower() + text[1:]}"


def _named(option: str, source: Source) -> str:
    """An option as the user set it: `--max-turns` on the command line, `night.toml:7: max_turns` in a file."""
    key = ".".join(str(part) for part in (*source.location, option))
    return "--" + option.replace("_", "-") if source.path is None else f"{source.where_key(option)}: {key}"


def _ignore(_line: str) -> None:
    pass


def placed_runs_dir(
    runs_dir: Path,
    source: Source | None,
    repositories: list[Path],
    *,
    directory: Path | None = None,
    log: Callable[[str], None] = _ignore,
) -> Path:
    """Run records never go inside a repository the run works on (agent/settings/runs_dir.py): a runs_dir set there
    (`source`: where) is refused, the default moves to the user's own folder, said in one line."""
    inside = enclosing_repository((directory or Path.cwd()) / runs_dir, repositories)
    if inside is None:
        return runs_dir
    if source is not None:
        raise SettingsError(
            f"{_named('runs_dir', source)} {runs_dir}: inside {inside}, a repository this run works on (its records "
            "hold the whole repository and would leave the checkout dirty): choose a directory outside it"
        )
    moved = user_runs_dir()
    if enclosing_repository(moved, repositories) is not None:
        raise SettingsError(f"{moved} lies inside a repository this run works on: give --runs-dir outside it")
    log(f"note: {runs_dir} here would be inside {inside}, a repository this run works on: run records go to {moved}")
    return moved


def _night_fields(values: dict[str, Any]) -> dict[str, Any]:
    """NightConfig's fields (nested: retention.keep_runs) from the merged options that land there."""
    fields: dict[str, Any] = {}
    for option, (field, convert) in NIGHT_FIELDS.items():
        if values.get(option) is not None:
            _set(fields, tuple(field.split(".")), convert(values[option]))
    return fields


def retention_config(layers: list[Layer]) -> RetentionConfig:
    """The bounds `refactor-agent gc` applies, from the layers; a night has them as its NightConfig.retention."""
    return RetentionConfig.model_validate(_night_fields(merged(layers)[0]).get("retention", {}))


def night_config(
    entries: list[tuple[Path, list[str], list[Layer]]],
    layers: list[Layer],
    *,
    night_file: Path | None = None,
    name: str | None = None,
    specs: list[TaskSpec] | None = None,
    now: datetime | None = None,
    directory: Path | None = None,
    log: Callable[[str], None] = _ignore,
) -> NightConfig:
    """The night: one RunConfig per entry from that entry's layers (all of them, lowest first); the night-wide
    settings (end time, run directory ...) from `layers`; a night file's `name` and its tasks' `specs` (one per task,
    in order). `directory`: where the command runs (None: the current one), which a relative runs directory is in;
    `log` gets the line that says the runs directory moved."""
    values, sources = merged(layers)
    fields: dict[str, Any] = {"night_file": night_file, "name": name, "specs": specs or [], **_night_fields(values)}
    fields["deadline_at"] = deadline_at(values, now)
    fields["repos"] = [run_config(repo, tasks, own) for repo, tasks, own in entries]
    night = NightConfig.model_validate(fields)
    check_dispatch(night)
    runs_dir = placed_runs_dir(
        night.runs_dir, sources.get("runs_dir"), night.repositories(), directory=directory, log=log
    )
    placed = {"runs_dir": runs_dir}  # each task's config.json says where its records really are
    return night.model_copy(update={**placed, "repos": [config.model_copy(update=placed) for config in night.repos]})


def deadline_at(values: dict[str, Any], now: datetime | None = None) -> datetime | None:
    """The night's end from `until` (a time) or `deadline` (a duration from now), if either is set."""
    if values.get("until") is not None:
        return parse_until(values["until"], now)
    if values.get("deadline") is not None:
        return (now or datetime.now().astimezone()) + timedelta(seconds=parse_duration(values["deadline"]))
    return None


def check_dispatch(night: NightConfig) -> None:
    """What the way tasks are run allows. The deadline and --task-timeout hold however tasks run: one after the
    other, in threads (a fleet of servers) or on Ray's nodes (agent/run/time_limit.py reaches any thread)."""
    if night.ray_address is not None and night.executor != "ray":
        raise SettingsError("--address: only with --executor ray")


def describe_settings(defaults: dict[str, Any], layers: list[Layer]) -> list[str]:
    """`config show`: every option with its resolved value and where it was set (`defaults`: the command's)."""
    values, sources = merged(layers)
    rows = [("setting", "value", "from")]
    for option in Options.model_fields:
        if option in values:
            value, where = values[option], sources[option].where_key(option)
        else:
            value, where = defaults.get(option), "default"
            if value is None and option in NIGHT_FIELDS:
                value = BY_NAME[option].model_default()
        shown = ", ".join(map(str, value)) if isinstance(value, list) else str(value)  # a fleet's servers
        rows.append((option, "-" if value is None else shown, where))
    width = [max(len(row[column]) for row in rows) for column in range(2)]
    return [f"{name:<{width[0]}}  {value:<{width[1]}}  {where}".rstrip() for name, value, where in rows]
