"""Imported last by the server the killed runs' CLIs are forked from (support/local_cli.py): what each forked CLI
would otherwise do again, done once there. Then the collector is told to leave all of it be (gc.freeze): a forked
CLI's full collections neither walk those objects nor copy their pages."""

import functools
import gc
import importlib
import threading

import typer.core
import typer.main
from typer._click import Command

from agent.cli import app
from agent.protocol.config import LLMConfig
from agent.server.chat import OpenAIChatModel
from tools.registry import default_registry
from tools.symbols import sandbox_mounts

from support.scripted_server import Reply, ScriptedServer

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


def _coercions(command: Command) -> None:
    """Each option's and argument's coercion (a pydantic TypeAdapter, built at the command's first call): 8 ms of
    each forked `run`."""
    for parameter in command.params:
        if isinstance(parameter, typer.core._TyperParameter):
            parameter.get_runtime_param()
    for subcommand in getattr(command, "commands", {}).values():
        _coercions(subcommand)


def _first_request() -> None:
    """A run's first request, here once: the tools' schemas (pydantic's, cached per class) and the OpenAI SDK's
    response models, whose schemas pydantic builds at their first use (together 10-15 ms of each forked CLI). To a
    scripted server of this process, whose threads and connection end before the server forks anything (a fork
    keeps only the forking thread)."""
    with ScriptedServer([Reply(tool_calls=[("finish", {"summary": "warm"})])]) as server:
        model = OpenAIChatModel(LLMConfig(server_url=server.url, max_retries=0))
        try:
            model.complete([{"role": "user", "content": "warm"}], default_registry().schemas())
        finally:
            model._client.close()
    for thread in threading.enumerate():
        if thread is not threading.current_thread():
            thread.join()


_coercions(typer.main.get_command(app))
_first_request()
gc.freeze()
