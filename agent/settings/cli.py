"""`refactor-agent config show`: each setting with its value and where it was set; and --config FILE, the option
every command that reads settings takes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agent.commands import CommandGroup, UsageProblem, one_line_errors
from agent.environment.spec import EnvironmentFileError
from agent.settings.layers import (
    ConfigFiles,
    Layer,
    SettingsError,
    Source,
    describe_settings,
    merged,
    options_from,
    placed_runs_dir,
)
from agent.settings.night_file import night_defaults, night_repositories
from agent.settings.options import OPTIONS, Options
from agent.settings.runs_dir import DEFAULT_RUNS_DIR, work_tree_holding

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        metavar="FILE",
        help="A config file of yours, over ~/.config/refactor-agent/config.toml and ./refactor-agent.toml.",
    ),
]


def given_options(context: typer.Context) -> Layer:
    """The options given on the command line (not those left at their defaults): the top layer."""
    given = {
        name: value
        for name, value in context.params.items()
        # By the source's name: typer vendors click, whose ParameterSource enum is not public there.
        if name in Options.model_fields and getattr(context.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"
    }
    return options_from(given, Source("command line"))


config_app = CommandGroup("The settings that apply, and where each comes from.")


@config_app.command("show")
def config_show(
    night_file: Annotated[Path | None, typer.Option("--night", help="Also the [defaults] of this night file.")] = None,
    repo: Annotated[
        list[Path],
        typer.Option(help="The repository a run would work on (default: the one you are in); repeatable."),
    ] = [],  # noqa: B006
    config: ConfigOption = None,
) -> None:
    """Each setting with its value and where it was set: default, a config file (with its line), a night file.
    The files are those a run on --repo (or the night's repositories) would read."""
    defaults = {option.name: option.default for option in OPTIONS}
    with one_line_errors(UsageProblem, SettingsError, EnvironmentFileError):
        targets = [path.resolve() for path in repo]
        if night_file is not None:
            targets += night_repositories(night_file)
        if not targets:  # as `run .` would see it
            targets = [path for path in [work_tree_holding(Path.cwd())] if path is not None]
        layers = ConfigFiles(config).layers(targets, typer.echo)
        if night_file is not None:
            layers.append(night_defaults(night_file))
        values, sources = merged(layers)
        # Where the records would go: the default moves out of a target repository, as for `run`.
        set_runs_dir = values.get("runs_dir")
        defaults["runs_dir"] = placed_runs_dir(
            set_runs_dir or DEFAULT_RUNS_DIR, sources.get("runs_dir") if set_runs_dir else None, targets, log=typer.echo
        )
        lines = describe_settings(defaults, layers)
    for line in lines:
        typer.echo(line)
