"""`refactor-agent run`, `night` and `resume`: the night's settings from the layers (config files, the night file,
the command line), checked before anything is created, then the run (agent/run/command.py). Their options are the
table's (agent/settings/options.py)."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from agent.commands import UsageProblem, one_line_errors
from agent.environment.spec import EnvironmentFileError
from agent.nights.plan import PlanOptions
from agent.protocol.config import NightConfig, RunConfig
from agent.record.progress import ResumeError, load_run_night, unfinished_run
from agent.settings.cli import ConfigOption
from agent.settings.cli import given_options as _given
from agent.settings.layers import (
    ConfigFiles,
    SettingsError,
    Source,
    check_dispatch,
    deadline_at,
    night_config,
    options_from,
    run_config,
)
from agent.settings.night_file import load_night
from agent.settings.options import BY_NAME, takes_options
from agent.settings.runs_dir import DEFAULT_RUNS_DIR, RunsNotFound, existing_runs_dir, user_runs_dir

ResumeOption = Annotated[bool, typer.Option(help="Continue the unfinished run of the same tasks if there is one.")]
JsonOption = Annotated[
    bool, typer.Option("--json", help="The run's events as JSON lines on stdout (the log on stderr), for scripts.")
]


def _read_tasks(tasks: list[str], task_file: Path | None) -> list[str]:
    """A task file holds one task per paragraph (blank-line separated); lines starting with # are comments."""
    collected = [task for task in tasks if task.strip()]
    if task_file is not None:
        try:
            text = task_file.read_text(encoding="utf-8")
        except OSError as error:
            raise UsageProblem(f"--task-file {task_file}: cannot read it: {error.strerror}") from None
        except UnicodeDecodeError as error:
            raise UsageProblem(f"--task-file {task_file}: not UTF-8 text (byte {error.start})") from None
        lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
        collected += [paragraph.strip() for paragraph in "\n".join(lines).split("\n\n") if paragraph.strip()]
    if not collected:
        raise UsageProblem("--task: give at least one --task or a --task-file")
    return collected


def _check_runs_dir(runs_dir: Path) -> None:
    """Fail before anything is created when the run record could not be written: probe the directory, or the
    nearest existing one it would be created in, with an unnamed temporary file (nothing is left behind)."""
    existing = runs_dir.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise UsageProblem(f"--runs-dir {runs_dir}: {existing} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        raise UsageProblem(f"--runs-dir {runs_dir}: cannot write in {existing}: {error.strerror}") from None


def usage_errors() -> contextlib.AbstractContextManager[None]:
    """Bad input of a command that takes settings: one line, exit 2."""
    return one_line_errors(UsageProblem, SettingsError, EnvironmentFileError)


def _execute(night: NightConfig, resume: str | None, as_json: bool, options: PlanOptions | None = None) -> None:
    # lazy: the run's machinery (openai, docker, rich) loads here, not for `pack`, `server` or `--help`.
    from agent.record.json_view import JsonView
    from agent.record.live import RunView
    from agent.run.command import execute

    raise typer.Exit(execute(night, view=JsonView() if as_json else RunView(), resume=resume, options=options))


def _pick_resume(night: NightConfig, wanted: bool) -> str | None:
    return unfinished_run(night) if wanted else None


@takes_options("run")
def run(
    context: typer.Context,
    repo: Annotated[Path, typer.Argument(help="The git repository to refactor (it is never modified).")],
    task: Annotated[list[str], typer.Option("--task", "-t", help="What to do; repeat for several tasks.")] = [],  # noqa: B006
    task_file: Annotated[Path | None, typer.Option(help="Tasks, one paragraph each (for cron).")] = None,
    resume: ResumeOption = False,
    config: ConfigOption = None,
    as_json: JsonOption = False,
    **options: Any,
) -> None:
    """Run the agent on REPO: one branch refactor-agent/<run-id>/<task> per task, a record in runs/<run-id>/.

    Settings not given here come from --config FILE, ./refactor-agent.toml (unless the current directory is
    inside REPO), then ~/.config/refactor-agent/config.toml."""
    with usage_errors():
        tasks = _read_tasks(task, task_file)
        target = repo.resolve()
        layers = [*ConfigFiles(config).layers([target], typer.echo), _given(context)]
        night = night_config([(target, tasks, layers)], layers, log=typer.echo)
        _check_runs_dir(night.runs_dir)
        chosen = _pick_resume(night, resume)
    _execute(night, chosen, as_json)


@takes_options("night")
def night(
    context: typer.Context,
    night_file: Annotated[Path, typer.Argument(help="The night file (TOML): repositories and their tasks.")],
    resume: ResumeOption = False,
    plan: Annotated[
        bool, typer.Option("--plan", help="Print what tonight would do with each task, then stop (nothing runs).")
    ] = False,
    only: Annotated[
        Literal["failed"] | None, typer.Option(help="failed: run only the tasks that failed last night.")
    ] = None,
    retry: Annotated[
        Literal["discarded"] | None, typer.Option(help="discarded: run the discarded tasks again too.")
    ] = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
    **options: Any,
) -> None:
    """Run every task of every repository in NIGHT_FILE, in order, in one run directory with one report. Each
    task keeps one branch refactor-agent/<night>/<task> across nights: updated when its base moved, left alone
    once merged or discarded (--plan shows tonight's decisions)."""
    with usage_errors():
        night = load_night(night_file, ConfigFiles(config), _given(context), log=typer.echo)
        _check_runs_dir(night.runs_dir)
        chosen = None if plan else _pick_resume(night, resume)
    choices = PlanOptions(plan_only=plan, only_failed=only == "failed", retry_discarded=retry == "discarded")
    _execute(night, chosen, as_json, choices)


@takes_options("resume")
def resume_run(
    context: typer.Context,
    run_id: Annotated[str, typer.Argument(help="The run to continue (its directory name under --runs-dir).")],
    runs_dir: Annotated[
        Path | None, typer.Option(help="Where its record is (default: runs, else the per-user runs folder).")
    ] = None,
    server: Annotated[str | None, typer.Option(help="The server, if not the run's own.")] = None,
    as_json: JsonOption = False,
    **options: Any,
) -> None:
    """Continue a run that was killed (kill -9, OOM, reboot) or stopped: finished tasks are not redone, the task
    in flight goes on from its last completed step."""
    with one_line_errors(ResumeError, SettingsError, RunsNotFound):
        runs = existing_runs_dir(runs_dir, run_id)
        if "/" in run_id or run_id.startswith(".") or not (runs / run_id).is_dir():
            where = runs if runs_dir is not None else f"{DEFAULT_RUNS_DIR} or {user_runs_dir()}"
            raise ResumeError(f"no run {run_id} in {where}")
        night = load_run_night(runs / run_id).model_copy(update={"runs_dir": runs})
        given = _given(context)
        if given.values.keys() & {"until", "deadline"}:
            night.deadline_at = deadline_at(given.values)
        check_dispatch(night)
        if server is not None:  # checked as `run` checks it (one line naming --server), then used for every task
            run_config(night.repos[0].repo, ["-"], [given])
            llm = {"server_url": server, "server_explicit": True, "servers": []}
            night.repos = [
                config.model_copy(update={"llm": config.llm.model_copy(update=llm)}) for config in night.repos
            ]
    _execute(night, run_id, as_json)


def run_config_of(repo: Path, tasks: list[str], values: dict[str, Any], config: Path | None = None) -> RunConfig:
    """A RunConfig from option values as `run` takes them (`eval` uses it): the config files' settings (`config`:
    --config FILE), then the values that differ from the options' defaults, as if given on the command line."""
    given = {name: value for name, value in values.items() if value != BY_NAME[name].default}
    _check_runs_dir(Path(str(values.get("runs_dir") or DEFAULT_RUNS_DIR)))
    files = ConfigFiles(config).layers([repo], typer.echo)
    return run_config(repo, tasks, [*files, options_from(given, Source("command line"))])
