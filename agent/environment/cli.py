"""`refactor-agent env build|list|prune`: the repositories' environment images, outside a run."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agent.commands import CommandGroup, failure
from agent.safety.printable import counted, printable
from sandbox.models import DEFAULT_IMAGE

if TYPE_CHECKING:
    import docker
    import git

    from agent.protocol.environment import EnvironmentSpec

env_app = CommandGroup("Build, list and prune the repositories' environment images.")


def _usage(message: str) -> typer.Exit:
    return failure(printable(message))


def _say(line: str, *, err: bool = False) -> None:
    """A build's output is the repository's: its escape sequences are shown, never obeyed."""
    typer.echo(printable(line), err=err)


@dataclass(frozen=True)
class _Inputs:
    """What `env build` and `env bundle` read before anything is built."""

    target: Path
    repository: git.Repo
    spec: EnvironmentSpec | None
    allowed_base_images: list[str]
    client: docker.DockerClient
    runs: Path


def _inputs(repo: Path, environment: Path | None, base: str) -> _Inputs:
    # lazy: docker-py and the environment's modules load for these commands only, not for every other one
    from agent.environment.spec import EnvironmentFileError, load_environment_file
    from agent.settings.layers import SettingsError, placed_runs_dir, user_setting
    from agent.settings.runs_dir import DEFAULT_RUNS_DIR
    from agent.worktree.workspace import WorkspaceError, open_repository
    from sandbox import SandboxError, docker_client, require_image

    try:
        target = repo.resolve()
        allowed_base_images = user_setting("allowed_base_images", [target], _say) or []
        spec = load_environment_file(environment) if environment is not None else None
        repository = open_repository(target)
        client = docker_client()
        require_image(client, base)
        # As a run's records: never in the repository's checkout (`cd repo && refactor-agent env build .`).
        runs = placed_runs_dir(DEFAULT_RUNS_DIR, None, [target], log=_say)
    except (EnvironmentFileError, SettingsError, WorkspaceError, SandboxError) as error:
        raise _usage(str(error)) from None
    return _Inputs(target, repository, spec, allowed_base_images, client, runs)


def _default_log(inputs: _Inputs, command: str) -> Path:
    # lazy: as _inputs'
    from agent.safety.private_dirs import private_dir

    return private_dir(inputs.runs) / f"{command}-{inputs.target.name}-{time.strftime('%Y%m%d-%H%M%S')}.log"


@env_app.command()
def build(
    repo: Annotated[Path, typer.Argument(help="The git repository (its committed HEAD is what is read).")],
    environment: Annotated[Path | None, typer.Option(help="TOML file with an [environment] table.")] = None,
    base: Annotated[str, typer.Option(help="Sandbox image the environment is layered on.")] = DEFAULT_IMAGE,
    test_cmd: Annotated[str | None, typer.Option(help="Test command to check (default: detected).")] = None,
    log: Annotated[Path | None, typer.Option(help="Build log [default: runs/env-build-<repo>-<time>.log]")] = None,
) -> None:
    """Build REPO's environment image now (or find it already built), and check its tests collect."""
    # lazy: docker-py and the build load for this command only
    from agent.environment.stage import prepare_environment

    inputs = _inputs(repo, environment, base)
    log_path = log or _default_log(inputs, "env-build")
    record = prepare_environment(
        inputs.repository,
        client=inputs.client,
        sandbox_image=base,
        image_explicit=False,
        spec=inputs.spec,
        test_command=test_cmd,
        log_path=log_path.absolute(),
        progress=_say,
        allowed_base_images=inputs.allowed_base_images,
    )
    if record.status == "failed":
        for line in record.log_tail:
            _say(f"  | {line}", err=True)
        _say(f"error: {record.error}" + (f" (log: {record.log})" if record.log else ""), err=True)
        raise typer.Exit(1)
    collected = (
        f"{counted(record.tests_collected, 'test')} collected"
        if record.tests_collected is not None
        else "tests not counted"
    )
    note = f" ({record.collect_note})" if record.collect_note else ""
    where = f"; log: {record.log}" if record.log else ""
    _say(f"environment {record.status}: {record.image} in {record.build_s:.1f}s; {collected}{note}{where}")


@env_app.command("bundle")
def bundle_environment(
    repo: Annotated[Path, typer.Argument(help="The git repository (its committed HEAD is what is read).")],
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="The bundle (`refactor-agent bundle DIR`).")],
    environment: Annotated[Path | None, typer.Option(help="TOML file with an [environment] table.")] = None,
    base: Annotated[str, typer.Option(help="Sandbox image the environment is layered on.")] = DEFAULT_IMAGE,
    log: Annotated[Path | None, typer.Option(help="Log (default: runs/env-bundle-<repo>-<time>.log)")] = None,
) -> None:
    """Add the wheels REPO's environment installs to DIR, so that it builds behind the air gap too."""
    # lazy: docker-py, packaging's tags and the build load for this command only
    from agent.bundle.steps import StepFailed
    from agent.environment.wheelhouse import NothingToCarry, carry_environment

    inputs = _inputs(repo, environment, base)
    if not directory.is_dir():
        raise _usage(f"{directory}: no such folder (make the bundle first: refactor-agent bundle DIR)")
    log_path = (log or _default_log(inputs, "env-bundle")).absolute()
    try:
        carried, left_out = carry_environment(
            inputs.repository,
            directory,
            client=inputs.client,
            sandbox_image=base,
            spec=inputs.spec,
            allowed_base_images=inputs.allowed_base_images,
            log=log_path,
            say=_say,
        )
    except NothingToCarry as error:
        _say(f"env bundle: {error}")
        return
    except StepFailed as error:
        _say(f"env bundle: error: {error}", err=True)
        for line in error.tail:
            _say(f"  | {line}", err=True)
        raise typer.Exit(1) from None
    for line in left_out:
        _say(f"  left out: {line}")
    where = directory.absolute() / carried.environment_file
    _say(
        f"env bundle: {carried.wheels} wheels for Python {carried.python}; there: refactor-agent run "
        f"{inputs.target.name} --environment {where} (log: {log_path})"
    )


@env_app.command("list")
def list_images() -> None:
    """The environment images on this machine, newest first."""
    # lazy: docker-py loads for this command only
    from agent.environment.build import ENV_LABEL, environment_images
    from sandbox import SandboxError, docker_client

    try:
        images = environment_images(docker_client())
    except SandboxError as error:
        raise _usage(str(error)) from None
    if not images:
        typer.echo("no environment images")
    for image in sorted(images, key=lambda image: image.attrs.get("Created", ""), reverse=True):
        size = image.attrs.get("Size", 0) / 1024**2
        for tag in image.tags:
            typer.echo(
                f"{tag}  {image.labels.get(ENV_LABEL, '?')}  {size:.0f} MB  {image.attrs.get('Created', '')[:19]}"
            )


@env_app.command()
def prune(
    all_images: Annotated[bool, typer.Option("--all", help="Remove every environment image.")] = False,
) -> None:
    """Remove environment images: all but the newest of each repository, or --all."""
    # lazy: docker-py loads for this command only
    from agent.environment.build import prune_images
    from sandbox import SandboxError, docker_client

    try:
        removed, kept = prune_images(docker_client(), 0 if all_images else 1)
    except SandboxError as error:
        raise _usage(str(error)) from None
    for tag, why in kept.items():
        typer.echo(f"kept {tag}: {why}", err=True)
    typer.echo(f"removed {counted(len(removed), 'environment image tag')}")
