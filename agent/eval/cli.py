"""`refactor-agent eval SUITE`: its own options, then the table's options of a task's run (agent/settings/options.py),
passed to each task's run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from agent.commands import EXIT_USAGE, UsageProblem
from agent.environment.spec import EnvironmentFileError
from agent.eval.suite import SuiteError, Variant, load_suite
from agent.run.cli import run_config_of
from agent.settings.cli import ConfigOption
from agent.settings.layers import SettingsError
from agent.settings.options import command_options, takes_options


@takes_options("eval")
def evaluate(
    suite: Annotated[Path, typer.Argument(help="A suite in RefactorBench's layout, e.g. bench/refactor-suite.")],
    variant: Annotated[Variant, typer.Option(help="Which prompts: problems/<variant>_problems.")] = "base",
    only: Annotated[list[str], typer.Option(help="REPOSITORY/TASK (the problem file without .txt); repeatable.")] = [],  # noqa: B006
    oracle: Annotated[
        bool, typer.Option(help="Apply each task's reference patch through the tools instead of a model.")
    ] = False,
    noop: Annotated[bool, typer.Option(help="A model that finishes at once without an edit (the floor).")] = False,
    compare: Annotated[Path | None, typer.Option(help="An earlier eval.json: print the per-task differences.")] = None,
    config: ConfigOption = None,
    **options: Any,
) -> None:
    """Run a suite of refactoring tasks (RefactorBench's layout) and score them: runs/<eval-id>/eval.json."""
    raise typer.Exit(
        _evaluate(suite, variant, only, oracle=oracle, noop=noop, compare=compare, config=config, **options)
    )


def _evaluate(
    suite: Path,
    variant: Variant,
    only: list[str],
    *,
    oracle: bool,
    noop: bool,
    compare: Path | None,
    config: Path | None,
    **options: Any,
) -> int:
    # lazy: the eval's machinery (docker, openai) loads only when an eval runs, not for every command's start-up.
    from agent.eval.run import execute_eval, load_report

    try:
        if oracle and noop:
            raise UsageProblem("--oracle and --noop: choose one")
        tasks = load_suite(suite, variant, only)
        if oracle:
            missing = [task.id for task in tasks if task.reference is None]
            if missing:
                raise UsageProblem(f"--oracle: {missing[0]} has no reference/<repository>/<task>.patch")
        other = load_report(compare) if compare is not None else None
        values = {option.name: options[option.name] for option in command_options("eval")}
        template = run_config_of(suite.resolve(), ["(each task of the suite)"], values, config)
    except (SuiteError, UsageProblem, EnvironmentFileError, SettingsError) as problem:
        typer.echo(f"error: {problem}", err=True)
        return EXIT_USAGE
    scripted = "oracle" if oracle else "noop" if noop else None
    return execute_eval(tasks, template, suite=suite, variant=variant, scripted=scripted, other=other)
