"""One option table (agent/settings/options.py): every command's options, the layers' model, where each value lands
and its default all come from it, so an option added in one place only fails here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import BaseModel
from typer.testing import CliRunner

from agent.cli import app
from agent.protocol.config import NightConfig, RunConfig
from agent.settings.layers import ConfigFiles, Layer, SettingsError, Source, run_config
from agent.settings.night_file import load_night
from agent.settings.options import NIGHT_WIDE, OPTIONS, Option, Options

from support.repos import make_repo

# Each command's own parameters: what names the repository, the tasks or the run, and --config FILE.
OWN = {
    "run": {"repo", "task", "task_file", "resume", "config", "as_json"},
    "night": {"night_file", "resume", "plan", "only", "retry", "config", "as_json"},
    "resume": {"run_id", "runs_dir", "server", "as_json"},
    "eval": {"suite", "variant", "only", "oracle", "noop", "compare", "config"},
}
# The one pair that lands in neither model by itself: both make NightConfig.deadline_at.
END_TIME = {"until", "deadline"}


def _registered(command: str) -> dict[str, Any]:
    group = typer.main.get_command(app)
    return {parameter.name: parameter for parameter in group.commands[command].params}  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", sorted(OWN))
def test_each_command_takes_exactly_its_options_from_the_table(command: str) -> None:
    registered = _registered(command)
    from_table = {option.name for option in OPTIONS if command in option.commands}
    assert set(registered) - OWN[command] == from_table
    assert OWN[command] <= set(registered)
    for name in from_table:  # the default typer shows and parses is the table's
        assert registered[name].default == next(option for option in OPTIONS if option.name == name).default


def _field(model: type[BaseModel], path: tuple[str, ...]) -> Any:
    """The field at `path` (walking nested models), or fail naming the path."""
    field = None
    for part in path:
        assert part in model.model_fields, f"{'.'.join(path)}: no field {part} in {model.__name__}"
        field = model.model_fields[part]
        annotation = field.annotation
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else BaseModel
    return field


def test_every_option_lands_in_the_settings_models() -> None:
    for option in OPTIONS:
        assert option.run is not None or option.night is not None or option.name in END_TIME, option.name
        if option.run is not None:
            _field(RunConfig, option.run)
        if option.night is not None:
            _field(NightConfig, option.night_path)
    assert list(Options.model_fields) == [option.name for option in OPTIONS]
    assert len({option.name for option in OPTIONS}) == len(OPTIONS)


def test_the_cli_default_is_the_models_default(tmp_path: Path) -> None:
    for option in OPTIONS:
        if not option.shown_default:
            assert option.default is None, option.name
            continue
        field = _field(RunConfig, option.run) if option.run is not None else _field(NightConfig, option.night_path)
        model_default = field.default
        if isinstance(model_default, BaseModel):
            model_default = model_default.model_dump()
        assert option.convert(option.default) == model_default, option.name
    assert run_config(tmp_path, ["x"], []) == RunConfig(repo=tmp_path, tasks=["x"])


def _toml(value: Any) -> str:
    return json.dumps(str(value) if isinstance(value, Path) else value)  # JSON's scalars and arrays are TOML's


def _example(option: Option, tmp_path: Path) -> Any:
    if option.name == "environment":  # a file with an [environment] table
        spec = tmp_path / "environment.toml"
        spec.write_text('[environment]\npackages = ["attrs"]\n')
        return str(spec)
    assert option.example is not None, f"{option.name}: give the table an example"
    return option.example


@pytest.fixture(scope="module")
def night_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository the night files below name: only read (its config files), so one for all of them."""
    return make_repo(tmp_path_factory.mktemp("night") / "repo")


@pytest.mark.parametrize("option", OPTIONS, ids=[option.name for option in OPTIONS])
@pytest.mark.parametrize("level", ["repo", "task"])
def test_scope_is_what_the_night_file_enforces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, night_repo: Path, option: Option, level: str
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    repo = night_repo
    setting = f"{option.name} = {_toml(_example(option, tmp_path))}"
    entry = (
        f'[[repo]]\npath = "{repo}"\n{setting}\ntasks = ["one"]\n'
        if level == "repo"
        else f'[[repo]]\npath = "{repo}"\n[[repo.task]]\ntext = "one"\n{setting}\n'
    )
    night_file = tmp_path / "night.toml"
    night_file.write_text(f'[defaults]\nruns_dir = "{tmp_path / "runs"}"\n{entry}')

    def load() -> NightConfig:
        files = ConfigFiles(directory=tmp_path)
        return load_night(night_file, files, Layer(Source("command line"), {}), log=lambda _line: None)

    if option.name in NIGHT_WIDE:
        with pytest.raises(
            SettingsError, match=rf"{option.name} is a setting of the whole night: put it in \[defaults\]"
        ):
            load()
        return
    (config,) = load().repos
    value: Any = config
    for part in option.run or ():
        value = getattr(value, part)
    # As the layers hand it on: checked by the layers' model, then converted for the settings model.
    layer_value = getattr(Options.model_validate({option.name: _example(option, tmp_path)}), option.name)
    assert value == option.convert(layer_value)


def test_config_show_lists_every_option_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    repo = make_repo(tmp_path / "repo")
    result = CliRunner().invoke(app, ["config", "show", "--repo", str(repo)])
    assert result.exit_code == 0, result.output
    rows = [line.split()[0] for line in result.stdout.splitlines()[1:]]
    assert rows == [option.name for option in OPTIONS]
