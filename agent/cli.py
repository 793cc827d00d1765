"""The `refactor-agent` command: the table of commands, each from its concern's cli.py."""

from __future__ import annotations

import typer

from agent.bundle.cli import bundle
from agent.environment.cli import env_app
from agent.eval.cli import evaluate
from agent.packing.cli import pack
from agent.review.cli import review_app
from agent.run.cli import night, resume_run, run
from agent.run.schedule import schedule_app
from agent.server.cli import doctor, server_app
from agent.settings.cli import config_app
from sandbox.cli import sandbox_app

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
app.command("run")(run)
app.command("night")(night)
app.command("resume")(resume_run)
app.add_typer(config_app, name="config")
app.command("eval")(evaluate)
