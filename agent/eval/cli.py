"""`refactor-agent eval SUITE`: its own options, then every option of `run`, passed to each task's run."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from agent.commands import EXIT_USAGE, UsageProblem
from agent.eval.suite import Variant


def _eval_parameters() -> list[inspect.Parameter]:
    def signature(
        suite: Annotated[Path, typer.Argument(help="A suite in RefactorBench's layout, e.g. bench/refactor-suite.")],
        variant: Annotated[Variant, typer.Option(help="Which prompts: problems/<variant>_problems.")] = "base",
        only: Annotated[
            list[str], typer.Option(help="REPOSITORY/TASK (the problem file without .txt); repeatable.")
        ] = [],  # noqa: B006
        oracle: Annotated[
            bool, typer.Option(help="Apply each task's reference patch through the tools instead of a model.")
        ] = False,
        noop: Annotated[bool, typer.Option(help="A model that finishes at once without an edit (the floor).")] = False,
        compare: Annotated[
            Path | None, typer.Option(help="An earlier eval.json: print the per-task differences.")
        ] = None,
    ) -> None: ...

    return list(inspect.signature(signature, eval_str=True).parameters.values())


def eval_command(run: Callable[..., None], run_options: list[str]) -> Callable[..., None]:
    """The `eval` command: its parameters are its own plus `run`'s options, taken from `run` itself so that each
    keeps one definition (help, default, type)."""
    run_parameters = inspect.signature(run, eval_str=True).parameters
    parameters = _eval_parameters() + [run_parameters[name] for name in run_options]

    def command(**values: Any) -> None:
        """Run a suite of refactoring tasks (RefactorBench's layout) and score them: runs/<eval-id>/eval.json."""
        raise typer.Exit(_evaluate(values))

    command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    return command


def _evaluate(values: dict[str, Any]) -> int:
    from agent import cli
    from agent.environment.spec import EnvironmentFileError
    from agent.eval.run import execute_eval, load_report
    from agent.eval.suite import SuiteError, load_suite
    from agent.settings.layers import SettingsError

    try:
        if values["oracle"] and values["noop"]:
            raise UsageProblem("--oracle and --noop: choose one")
        tasks = load_suite(values["suite"], values["variant"], values["only"])
        if values["oracle"]:
            missing = [task.id for task in tasks if task.reference is None]
            if missing:
                raise UsageProblem(f"--oracle: {missing[0]} has no reference/<repository>/<task>.patch")
        other = load_report(values["compare"]) if values["compare"] is not None else None
        options = {name: values[name] for name in cli.run_option_names()}
        template = cli.run_config_of(values["suite"].resolve(), ["(each task of the suite)"], options)
    except (SuiteError, UsageProblem, EnvironmentFileError, SettingsError) as problem:
        typer.echo(f"error: {problem}", err=True)
        return EXIT_USAGE
    scripted = "oracle" if values["oracle"] else "noop" if values["noop"] else None
    return execute_eval(
        tasks, template, suite=values["suite"], variant=values["variant"], scripted=scripted, other=other
    )
