"""The `refactor-agent` command: the table of commands, each from its concern's cli.py, `run` first (help lists
them in this order: what a person does first, then what they do next)."""

from __future__ import annotations

from importlib.metadata import version
from typing import Annotated

import typer

from agent.bundle.cli import bundle
from agent.commands import CommandGroup
from agent.environment.cli import env_app
from agent.eval.cli import evaluate
from agent.packing.cli import pack
from agent.retention.cli import gc
from agent.review.cli import review_app
from agent.run.cli import night, resume_run, run
from agent.run.schedule import schedule_app
from agent.server.cli import doctor, server_app
from agent.settings.cli import config_app
from sandbox.cli import sandbox_app

PROGRAM = "refactor-agent"

app = CommandGroup("Overnight whole-repository refactoring with a local llama-server.")


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"{PROGRAM} {version(PROGRAM)}")
        raise typer.Exit()


@app.callback()
def _top(
    _version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_print_version, help="Print the version and exit.")
    ] = False,
) -> None:
    """Overnight whole-repository refactoring with a local llama-server."""


app.command("run")(run)
app.command("night")(night)
app.command("resume")(resume_run)
app.add_typer(review_app, name="review")
app.command("doctor")(doctor)
app.add_typer(server_app, name="server")
app.command("pack")(pack)
app.add_typer(env_app, name="env")
app.add_typer(schedule_app, name="schedule")
app.add_typer(config_app, name="config")
app.add_typer(sandbox_app, name="sandbox")
app.command("eval")(evaluate)
app.command("gc")(gc)
app.command("bundle")(bundle)
