"""Imported last by the server the killed runs' CLIs are forked from (support/local_cli.py): what each forked CLI
would otherwise do again, done once there. Then the collector is told to leave all of it be (gc.freeze): a forked
CLI's full collections neither walk those objects nor copy their pages."""

import functools
import gc
import importlib

import typer.main

from agent.cli import app
from tools.symbols import sandbox_mounts

# What a run imports only when it gets there: its clients' HTTP transports, the OpenAI client's chat resources (a
# lazy package: its modules by name), what its output and its report render with.
LATE_IMPORTS = (
    "httpcore",
    "httpcore2",
    "jiter",
    "openai.pagination",
    "openai.resources.chat.chat",
    "openai.resources.chat.completions.completions",
    "pygments.styles.default",
    "rich._emoji_codes",
    "typer._adapters",
    "typer._click.decorators",
    "agent.record.json_view",
)

for name in LATE_IMPORTS:
    importlib.import_module(name)
sandbox_mounts()  # the installed distributions the symbol tools mount: a walk of their files, cached
# typer builds the app's click command at each call (every command's annotations read: 20 ms of a CLI): built here
# once, as tests/conftest.py does for CliRunner; a forked CLI calls the app as `python -m agent` does.
typer.main.get_command = functools.cache(typer.main.get_command)
typer.main.get_command(app)
gc.freeze()
