"""The `refactor-agent` command."""

from __future__ import annotations

import inspect
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from agent.config import DEFAULT_SERVER_URL, Effort, Executor, LLMConfig, RunConfig, SamplingConfig, Switch
from agent.environment.cli import env_app
from agent.environment.spec import EnvironmentFileError, load_environment_file
from agent.eval.cli import eval_command
from agent.pack_cli import pack
from agent.review.cli import review_app
from agent.server.cli import doctor, server_app
from sandbox.cli import sandbox_app
from sandbox.models import DEFAULT_IMAGE

MIB = 1024**2

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Overnight whole-repository refactoring with a local llama-server."
)
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(server_app, name="server")
app.add_typer(review_app, name="review")
app.add_typer(env_app, name="env")
app.command("pack")(pack)
app.command("doctor")(doctor)


EXIT_USAGE = 2
# RunConfig fields (at any depth) whose option is not the field name with dashes.
OPTION_OF_FIELD = {
    "tasks": "--task",
    "server_url": "--server",
    "servers": "--server",
    "ray_address": "--address",
    "command_timeout_s": "--command-timeout",
    "idle_timeout_s": "--idle-timeout",
    "max_file_bytes": "--max-file-size",
}


# `run`'s parameters that are not options every task shares (see run_option_names).
NOT_RUN_OPTIONS = ("repo", "task", "task_file", "allow_dirty", "executor", "address")


def _switch(enabled: bool) -> Switch:
    return "on" if enabled else "off"


SYMBOL_TOOLS_DEFAULT = _switch(RunConfig.model_fields["symbol_tools"].default)
LEDGER_DEFAULT = _switch(RunConfig.model_fields["ledger"].default)


class UsageProblem(Exception):
    """Bad input on the command line; str() is the one line the user sees."""


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


def _option_problem(error: ValidationError) -> str:
    """RunConfig's complaints in the words of the command line: the option, the value given, what is wrong."""
    problems = []
    for detail in error.errors():
        field = next((str(part) for part in reversed(detail["loc"]) if isinstance(part, str)), "")
        option = OPTION_OF_FIELD.get(field, "--" + field.replace("_", "-"))
        # A validator's own ValueError reads as its text; pydantic's "Value error, " prefix says nothing more.
        text = str(detail["ctx"]["error"]) if detail["type"] == "value_error" else detail["msg"]
        message = text[:1].lower() + text[1:]
        problems.append(f"{option} {detail['input']}: {message}")
    return "; ".join(problems)


@app.command()
def run(
    repo: Annotated[Path, typer.Argument(help="The git repository to refactor (it is never modified).")],
    task: Annotated[list[str], typer.Option("--task", "-t", help="What to do; repeat for several tasks.")] = [],  # noqa: B006
    task_file: Annotated[Path | None, typer.Option(help="Tasks, one paragraph each (for cron).")] = None,
    server: Annotated[
        list[str],
        typer.Option(
            help=f"OpenAI-compatible base URL [default: {DEFAULT_SERVER_URL}]; repeat for a fleet (tasks in parallel)"
        ),
    ] = [],  # noqa: B006
    model: Annotated[str, typer.Option(help="Model name sent to the server.")] = LLMConfig().model,
    effort: Annotated[Effort, typer.Option(help="Reasoning effort.")] = "max",
    image: Annotated[
        str | None,
        typer.Option(help=f"Sandbox image, used as is [default: the repository's environment on {DEFAULT_IMAGE}]"),
    ] = None,
    environment: Annotated[
        Path | None, typer.Option(help="TOML file whose [environment] table describes the environment.")
    ] = None,
    runs_dir: Annotated[Path, typer.Option(help="Where run records go.")] = Path("runs"),
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
        int, typer.Option(help="MiB; larger new files are not committed (listed in summary.json).")
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
    allow_dirty: Annotated[
        bool, typer.Option(help="Run although REPO has uncommitted changes (they are ignored).")
    ] = False,
    executor: Annotated[
        Executor, typer.Option(help="local: here; ray: each task on a Ray node labelled refactor-agent.")
    ] = RunConfig.model_fields["executor"].default,
    address: Annotated[str | None, typer.Option(help="The Ray cluster (--executor ray) [default: Ray's].")] = None,
) -> None:
    """Run the agent on REPO: one branch refactor-agent/<run-id>/<task> per task, a record in runs/<run-id>/."""
    given = locals()
    # The run's machinery (openai, docker, rich) loads here, not for `pack` or `server`.
    from agent.live import RunView
    from agent.session import execute

    try:
        tasks = _read_tasks(task, task_file)
        config = run_config(repo.resolve(), tasks, **{name: given[name] for name in run_option_names()})
        if address is not None and executor != "ray":
            raise UsageProblem("--address: only with --executor ray")
        config = RunConfig.model_validate({**config.model_dump(), "executor": executor, "ray_address": address})
    except (UsageProblem, EnvironmentFileError) as problem:
        typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    except ValidationError as error:
        typer.echo(f"error: {_option_problem(error)}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    raise typer.Exit(execute(config, allow_dirty=allow_dirty, view=RunView()))


def run_option_names() -> list[str]:
    """`run`'s options that shape every task (`eval` takes them too): all but what names the repository and tasks."""
    return [name for name in inspect.signature(run).parameters if name not in NOT_RUN_OPTIONS]


def run_config(
    repo: Path,
    tasks: list[str],
    *,
    server: list[str],
    model: str,
    effort: Effort,
    image: str | None,
    environment: Path | None,
    runs_dir: Path,
    max_turns: int,
    test_cmd: str | None,
    command_timeout: float,
    idle_timeout: float,
    repair_rounds: int,
    max_file_size: int,
    temperature: float,
    top_p: float,
    min_p: float,
    seed: int | None,
    max_retries: int,
    max_tokens: int | None,
    symbol_tools: Switch,
    ledger: Switch,
) -> RunConfig:
    """The RunConfig of `run`'s options; UsageProblem, EnvironmentFileError or ValidationError when they are bad."""
    _check_runs_dir(runs_dir)
    if image is not None and environment is not None:
        raise UsageProblem("--image and --environment: an explicit image is used as is, choose one")
    spec = load_environment_file(environment) if environment is not None else None
    return RunConfig(
        repo=repo,
        tasks=tasks,
        llm=LLMConfig(
            server_url=server[0] if server else DEFAULT_SERVER_URL,
            server_explicit=bool(server),
            servers=server if len(server) > 1 else [],
            model=model,
            effort=effort,
            max_retries=max_retries,
            idle_timeout_s=idle_timeout,
            sampling=SamplingConfig(
                temperature=temperature, top_p=top_p, min_p=min_p, seed=seed, max_tokens=max_tokens
            ),
        ),
        image=image or DEFAULT_IMAGE,
        image_explicit=image is not None,
        environment=spec,
        runs_dir=runs_dir,
        max_turns=max_turns,
        test_cmd=test_cmd,
        command_timeout_s=command_timeout,
        repair_rounds=repair_rounds,
        max_file_bytes=max_file_size * MIB,
        symbol_tools=symbol_tools == "on",
        ledger=ledger == "on",
    )


app.command("eval")(eval_command(run, run_option_names()))
