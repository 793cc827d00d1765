"""`refactor-agent server start|stop|status` and `refactor-agent doctor`; the lead's CLI mounts these."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from agent.commands import EXIT_FAILED, CommandGroup, failure
from agent.protocol.config import DEFAULT_IMAGE, DEFAULT_SERVER_URL, LLMConfig
from agent.protocol.effort import Effort
from agent.server.errors import ServerError
from agent.server.presets import DEFAULT_READY_TIMEOUT_S, PresetName, PresetRequest, build_preset

# The launcher, doctor and httpx load inside the commands: every other command imports this module too.

server_app = CommandGroup("Start, stop and inspect the local llama-server.")

STATUS_MARK = {"ok": "[ok]", "warn": "[warn]", "fail": "[FAIL]", "skip": "[skip]"}


# Unknown options are a usage error; what follows `--` is llama-server's (click hands it over as extra arguments).
@server_app.command(context_settings={"allow_extra_args": True})
def start(
    context: typer.Context,
    preset: Annotated[PresetName, typer.Option(help="dspark: DeepSeek V4 Flash + DSpark; embedded: SmolLM2 on CPU")] = (
        "embedded"
    ),
    model: Annotated[Path | None, typer.Option(help="target GGUF (first shard); required for dspark")] = None,
    draft: Annotated[Path | None, typer.Option(help="DSpark drafter GGUF; required for dspark")] = None,
    ctx: Annotated[
        int | None, typer.Option(min=1, help="context size in tokens per slot (KV memory grows linearly with it)")
    ] = None,
    parallel: Annotated[
        int, typer.Option(min=1, help="slots: tasks served at once (`run --parallel N`); the context is N x --ctx")
    ] = 1,
    gpu_layers: Annotated[str | None, typer.Option(help="-ngl: layers on the GPU, a number or 'all'")] = None,
    self_draft: Annotated[bool, typer.Option(help="embedded: draft with the model itself (exercises speculation)")] = (
        False
    ),
    host: str = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8080,
    binary: Annotated[Path | None, typer.Option(help="your own llama-server build (e.g. CUDA)")] = None,
    wait: Annotated[float, typer.Option(help="seconds to wait for /health")] = DEFAULT_READY_TIMEOUT_S,
) -> None:
    """Start llama-server with a preset; arguments after `--` go to llama-server unchanged."""
    # lazy: the launcher and httpx load for the server commands only
    from agent.server.binary import find_binary
    from agent.server.launcher import start_server

    try:
        request = PresetRequest(
            preset=preset,
            model=model,
            draft=draft,
            ctx_size=ctx,
            gpu_layers=gpu_layers,
            self_draft=self_draft,
            parallel=parallel,
            host=host,
            port=port,
            extra_args=list(context.args),
        )
        start_server(build_preset(request), binary=find_binary(binary), log=typer.echo, ready_timeout_s=wait)
    except ServerError as error:
        raise failure(str(error), EXIT_FAILED) from None


@server_app.command()
def stop(port: Annotated[int | None, typer.Option(help="which server; needed when several run")] = None) -> None:
    """Stop a llama-server that `server start` started."""
    # lazy: as start's
    from agent.server.launcher import stop_server

    try:
        stop_server(port, log=typer.echo)
    except ServerError as error:
        raise failure(str(error), EXIT_FAILED) from None


@server_app.command()
def status() -> None:
    """List the llama-servers `server start` started, with their health."""
    # lazy: as start's
    from agent.server.launcher import read_states, server_status

    states = read_states()
    if not states:
        typer.echo("no llama-server started by refactor-agent")
        return
    for state in states:
        current = server_status(state)
        running = "running" if current.running else "not running"
        typer.echo(f"{state.url}  preset {state.preset}  pid {state.pid} {running}  health: {current.health}")
        typer.echo(f"  log {state.log_file}")


def doctor(
    server: Annotated[str, typer.Option(help="llama-server base URL")] = DEFAULT_SERVER_URL,
    repo: Annotated[Path | None, typer.Option(help="compare the context size with this repository")] = None,
    min_accepted_per_pass: Annotated[
        float, typer.Option(help="floor for accepted draft tokens per verification pass")
    ] = 1.0,
    effort: Annotated[Effort, typer.Option(help="the effort runs will ask for (thinking must be on for it)")] = (
        LLMConfig.model_fields["effort"].default
    ),
    image: Annotated[str, typer.Option(help="sandbox image that must exist")] = DEFAULT_IMAGE,
    environment: Annotated[Path | None, typer.Option(help="TOML file with an [environment] table (as `run`)")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="print the results as JSON")] = False,
) -> None:
    """Check the llama-server, speculation, prompt cache, Docker and the repository's environment; exit 1 on failure."""
    # lazy: the doctor's checks (httpx, docker-py, the environment) load for this command only
    from agent.server.doctor import DoctorOptions, failed, run_doctor

    options = DoctorOptions(
        server_url=server,
        repo=repo,
        min_accepted_per_pass=min_accepted_per_pass,
        effort=effort,
        image=image,
        environment=environment,
    )
    results = run_doctor(options)
    if json_output:
        typer.echo(json.dumps([result.model_dump() for result in results], indent=2))
    else:
        for result in results:
            typer.echo(f"{STATUS_MARK[result.status]:<6} {result.name:<12} {result.message}")
    if failed(results):
        raise typer.Exit(1)
