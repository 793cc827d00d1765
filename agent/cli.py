"""The `refactor-agent` command."""

from __future__ import annotations

import contextlib
import inspect
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from agent.bundle.cli import bundle
from agent.commands import UsageProblem, one_line_errors
from agent.environment.cli import env_app
from agent.environment.spec import EnvironmentFileError
from agent.eval.cli import eval_command
from agent.packing.cli import pack
from agent.protocol.config import (
    DEFAULT_SERVER_URL,
    Effort,
    Executor,
    LLMConfig,
    NightConfig,
    RunConfig,
    SamplingConfig,
    Switch,
)
from agent.record.progress import ResumeError, load_run_night, unfinished_run
from agent.review.cli import review_app
from agent.run.schedule import schedule_app
from agent.server.cli import doctor, server_app
from agent.settings.layers import (
    MIB,
    ConfigFiles,
    Layer,
    Options,
    SettingsError,
    Source,
    check_dispatch,
    deadline_at,
    describe_settings,
    merged,
    night_config,
    options_from,
    placed_runs_dir,
    run_config,
)
from agent.settings.night_file import load_night, night_defaults, night_repositories
from agent.settings.runs_dir import DEFAULT_RUNS_DIR, runs_dir_to_read, user_runs_dir
from sandbox.cli import sandbox_app
from sandbox.models import DEFAULT_IMAGE

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Overnight whole-repository refactoring with a local llama-server."
)
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(server_app, name="server")
app.add_typer(review_app, name="review")
app.add_typer(schedule_app, name="schedule")
app.add_typer(env_app, name="env")
app.command("pack")(pack)
app.command("doctor")(doctor)
app.command("bundle")(bundle)


# `run`'s parameters that are not options every task shares (see run_option_names): what names the repository
# and the tasks, and what belongs to the night as a whole.
NOT_RUN_OPTIONS = (
    "context",
    "repo",
    "task",
    "task_file",
    "allow_dirty",
    "resume",
    "until",
    "deadline",
    "min_task_time",
    "on_finish",
    "parallel",
    "executor",
    "address",
)


def _switch(enabled: bool) -> Switch:
    return "on" if enabled else "off"


SYMBOL_TOOLS_DEFAULT = _switch(RunConfig.model_fields["symbol_tools"].default)
LEDGER_DEFAULT = _switch(RunConfig.model_fields["ledger"].default)


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


def _given(context: typer.Context) -> Layer:
    """The options given on the command line (not those left at their defaults): the top layer."""
    given = {
        name: value
        for name, value in context.params.items()
        # By the source's name: typer vendors click, whose ParameterSource enum is not public there.
        if name in Options.model_fields and getattr(context.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"
    }
    return options_from(given, Source("command line"))


def _usage_errors() -> contextlib.AbstractContextManager[None]:
    return one_line_errors(UsageProblem, SettingsError, EnvironmentFileError)


def _execute(night: NightConfig, resume: str | None) -> None:
    # lazy: the run's machinery (openai, docker, rich) loads here, not for `pack`, `server` or `--help`.
    from agent.record.live import RunView
    from agent.run.command import execute

    raise typer.Exit(execute(night, view=RunView(), resume=resume))


def _pick_resume(night: NightConfig, wanted: bool) -> str | None:
    return unfinished_run(night) if wanted else None


ServerOption = Annotated[
    list[str] | None,
    typer.Option(
        help=f"OpenAI-compatible base URL (default: {DEFAULT_SERVER_URL}); repeat for a fleet: tasks in parallel."
    ),
]
ExecutorOption = Annotated[
    Executor | None, typer.Option(help="local: here (default); ray: each task on a Ray node labelled refactor-agent.")
]
ParallelOption = Annotated[
    int | None,
    typer.Option(min=1, help="Tasks at once on each server, each in a slot of its own (server start --parallel N)."),
]
AddressOption = Annotated[str | None, typer.Option(help="The Ray cluster to join (--executor ray; default: Ray's).")]
UntilOption = Annotated[
    str | None, typer.Option(help="End time: HH:MM (its next occurrence, local time) or a date and time.")
]
DeadlineOption = Annotated[str | None, typer.Option(help="End after this long: 45s, 90m, 5h.")]
MinTaskTimeOption = Annotated[
    str | None, typer.Option(help="No task starts when less than this remains before the end (default: 20m).")
]
TaskTimeoutOption = Annotated[str | None, typer.Option(help="Wall time of one task (90m); then it is timed_out.")]
TokensPerTaskOption = Annotated[
    int | None, typer.Option(help="Tokens one task may spend (prompt processed + generated).")
]
OnFinishOption = Annotated[
    str | None, typer.Option(help="Shell command run after the run; $REFACTOR_AGENT_REPORT is the report's path.")
]
ResumeOption = Annotated[bool, typer.Option(help="Continue the unfinished run of the same tasks if there is one.")]
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="A config file of yours, over ~/.config/refactor-agent/config.toml and ./refactor-agent.toml.",
    ),
]


@app.command()
def run(
    context: typer.Context,
    repo: Annotated[Path, typer.Argument(help="The git repository to refactor (it is never modified).")],
    task: Annotated[list[str], typer.Option("--task", "-t", help="What to do; repeat for several tasks.")] = [],  # noqa: B006
    task_file: Annotated[Path | None, typer.Option(help="Tasks, one paragraph each (for cron).")] = None,
    server: ServerOption = None,
    model: Annotated[str, typer.Option(help="Model name sent to the server.")] = LLMConfig().model,
    effort: Annotated[Effort, typer.Option(help="Reasoning effort.")] = "max",
    image: Annotated[
        str | None,
        typer.Option(help=f"Sandbox image, used as is [default: the repository's environment on {DEFAULT_IMAGE}]"),
    ] = None,
    environment: Annotated[
        Path | None, typer.Option(help="TOML file whose [environment] table describes the environment.")
    ] = None,
    runs_dir: Annotated[
        Path, typer.Option(help="Where run records go; never inside REPO (the default moves to the per-user folder).")
    ] = DEFAULT_RUNS_DIR,
    max_turns: Annotated[int, typer.Option(help="Model turns per task.")] = RunConfig.model_fields["max_turns"].default,
    test_cmd: Annotated[str | None, typer.Option(help="Test command (default: detected).")] = None,
    command_timeout: Annotated[
        float, typer.Option(help="Seconds before a sandbox command is killed.")
    ] = RunConfig.model_fields["command_timeout_s"].default,
    idle_timeout: Annotated[
        float,
        typer.Option(help="Seconds of silence from the server (no token, no prefill progress) before a retry."),
    ] = LLMConfig().idle_timeout_s,
    repair_rounds: Annotated[
        int, typer.Option(help="Times the gate sends regressed tests back to the model.")
    ] = RunConfig.model_fields["repair_rounds"].default,
    max_file_size: Annotated[
        int, typer.Option(help="MiB; larger files are not committed, new or grown (listed in summary.json).")
    ] = RunConfig.model_fields["max_file_bytes"].default // MIB,
    temperature: Annotated[float, typer.Option()] = SamplingConfig().temperature,
    top_p: Annotated[float, typer.Option()] = SamplingConfig().top_p,
    min_p: Annotated[float, typer.Option()] = SamplingConfig().min_p,
    seed: Annotated[int | None, typer.Option(help="Sampling seed (reproducible runs).")] = None,
    max_retries: Annotated[
        int, typer.Option(help="Retries of a failing server, backoff from 2 s.")
    ] = LLMConfig().max_retries,
    max_tokens: Annotated[int | None, typer.Option(help="Cap per response (default: the server's).")] = None,
    symbol_tools: Annotated[
        Switch, typer.Option(help="find_symbol, rename_symbol and move_symbol for the model.")
    ] = SYMBOL_TOOLS_DEFAULT,
    ledger: Annotated[
        Switch, typer.Option(help="The state ledger after each edit, and the plan tools.")
    ] = LEDGER_DEFAULT,
    task_timeout: TaskTimeoutOption = None,
    max_tokens_per_task: TokensPerTaskOption = None,
    until: UntilOption = None,
    deadline: DeadlineOption = None,
    min_task_time: MinTaskTimeOption = None,
    on_finish: OnFinishOption = None,
    allow_dirty: Annotated[
        bool, typer.Option(help="Run although REPO has uncommitted changes (they are ignored).")
    ] = False,
    resume: ResumeOption = False,
    parallel: ParallelOption = None,
    executor: ExecutorOption = None,
    address: AddressOption = None,
    config: ConfigOption = None,
) -> None:
    """Run the agent on REPO: one branch refactor-agent/<run-id>/<task> per task, a record in runs/<run-id>/.

    Settings not given here come from --config FILE, ./refactor-agent.toml (unless the current directory is
    inside REPO), then ~/.config/refactor-agent/config.toml."""
    with _usage_errors():
        tasks = _read_tasks(task, task_file)
        target = repo.resolve()
        layers = [*ConfigFiles(config).layers([target], typer.echo), _given(context)]
        night = night_config([(target, tasks, layers)], layers, log=typer.echo)
        _check_runs_dir(night.runs_dir)
        chosen = _pick_resume(night, resume)
    _execute(night, chosen)


@app.command()
def night(
    context: typer.Context,
    night_file: Annotated[Path, typer.Argument(help="The night file (TOML): repositories and their tasks.")],
    runs_dir: Annotated[
        Path | None, typer.Option(help="Where run records go (default: runs, or runs_dir in a config file).")
    ] = None,
    server: ServerOption = None,
    until: UntilOption = None,
    deadline: DeadlineOption = None,
    min_task_time: MinTaskTimeOption = None,
    on_finish: OnFinishOption = None,
    resume: ResumeOption = False,
    parallel: ParallelOption = None,
    executor: ExecutorOption = None,
    address: AddressOption = None,
    config: ConfigOption = None,
) -> None:
    """Run every task of every repository in NIGHT_FILE, in order, in one run directory with one report."""
    with _usage_errors():
        night = load_night(night_file, ConfigFiles(config), _given(context), log=typer.echo)
        _check_runs_dir(night.runs_dir)
        chosen = _pick_resume(night, resume)
    _execute(night, chosen)


@app.command("resume")
def resume_run(
    context: typer.Context,
    run_id: Annotated[str, typer.Argument(help="The run to continue (its directory name under --runs-dir).")],
    runs_dir: Annotated[
        Path | None, typer.Option(help="Where its record is (default: runs, else the per-user runs folder).")
    ] = None,
    server: Annotated[str | None, typer.Option(help="The server, if not the run's own.")] = None,
    until: UntilOption = None,
    deadline: DeadlineOption = None,
) -> None:
    """Continue a run that was killed (kill -9, OOM, reboot) or stopped: finished tasks are not redone, the task
    in flight goes on from its last completed step."""
    with one_line_errors(ResumeError, SettingsError):
        runs = runs_dir_to_read(runs_dir, run_id)
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
    _execute(night, run_id)


config_app = typer.Typer(no_args_is_help=True, help="The settings that apply, and where each comes from.")
app.add_typer(config_app, name="config")


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
    defaults = {name: parameter.default for name, parameter in inspect.signature(run).parameters.items()}
    with _usage_errors():
        targets = [path.resolve() for path in repo]
        if night_file is not None:
            targets += night_repositories(night_file)
        if not targets:  # as `run .` would see it
            targets = [path for path in [_work_tree_holding(Path.cwd())] if path is not None]
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


def _work_tree_holding(directory: Path) -> Path | None:
    """The git work tree `directory` is in (found by its `.git`, no git runs), if any."""
    resolved = directory.resolve()
    return next((path for path in [resolved, *resolved.parents] if (path / ".git").exists()), None)


def run_option_names() -> list[str]:
    """`run`'s options that shape every task (`eval` takes them too)."""
    return [name for name in inspect.signature(run).parameters if name not in NOT_RUN_OPTIONS]


def run_config_of(repo: Path, tasks: list[str], values: dict[str, object]) -> RunConfig:
    """A RunConfig from option values as `run` takes them (`eval` uses it): the config files' settings, then the
    values that differ from `run`'s defaults, as if given on the command line."""
    defaults = inspect.signature(run).parameters
    explicit = values.get("config")
    given = {name: value for name, value in values.items() if value != defaults[name].default and name != "config"}
    _check_runs_dir(Path(str(values.get("runs_dir") or DEFAULT_RUNS_DIR)))
    files = ConfigFiles(Path(str(explicit)) if explicit is not None else None).layers([repo], typer.echo)
    return run_config(repo, tasks, [*files, options_from(given, Source("command line"))])


app.command("eval")(eval_command(run, run_option_names()))
