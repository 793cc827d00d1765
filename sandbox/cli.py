"""`refactor-agent sandbox ...`: building the sandbox image and cleaning up after crashed runs."""

from typing import Annotated

import typer

from agent.commands import CommandGroup
from agent.safety.printable import counted
from sandbox.errors import SandboxError
from sandbox.models import DEFAULT_IMAGE
from sandbox.suites import DEFAULT_SUITE, PYTHON_OF_SUITE, image_for_suite

sandbox_app = CommandGroup("Build and maintain the Docker sandbox the agent runs commands in.")


def _fail(error: SandboxError) -> typer.Exit:
    typer.secho(f"error: {error}", err=True, fg=typer.colors.RED)
    return typer.Exit(1)


@sandbox_app.command()
def build(
    tag: Annotated[
        str | None, typer.Option(help=f"Tag of the image to build (default: {DEFAULT_IMAGE}, or the release's).")
    ] = None,
    base: Annotated[
        str | None, typer.Option(help="Debian-like image to build FROM (default: the Dockerfile's).")
    ] = None,
    bootstrap: Annotated[
        bool,
        typer.Option(help="Make the base with debootstrap from Debian's packages: no image registry needed."),
    ] = False,
    suite: Annotated[
        str,
        typer.Option(
            help="Debian release: "
            + ", ".join(f"{name} (Python {python})" for name, python in PYTHON_OF_SUITE.items())
            + ". Projects whose requires-python needs a newer Python get the newer release's image."
        ),
    ] = DEFAULT_SUITE,
) -> None:
    """Build the sandbox image (python3, pytest, git, bash, coreutils)."""
    # lazy: docker-py loads only for the commands that use it
    from sandbox.image import build_image

    try:
        build_image(tag or image_for_suite(suite), base=base, bootstrap=bootstrap, suite=suite, log=typer.echo)
    except SandboxError as error:
        raise _fail(error) from error


@sandbox_app.command()
def sweep() -> None:
    """Remove sandbox and build containers, worktrees and scratch directories left behind by runs and builds
    that crashed or were killed. Their branches are kept (with any commits on them) and can be deleted with
    `git branch -D`."""
    # lazy: docker-py loads only for the commands that use it (the run's scratch layout is the agent's)
    from agent.worktree.leftovers import sweep_all_scratch
    from sandbox.container import sweep_leftovers
    from sandbox.daemon import docker_client

    try:
        removed = sweep_leftovers(docker_client())
    except SandboxError as error:
        raise _fail(error) from error
    typer.echo(f"removed {counted(removed, 'leftover sandbox container')}")
    runs, builds = sweep_all_scratch()
    typer.echo(f"removed the worktrees and scratch directories of {counted(runs, 'unfinished run')}")
    typer.echo(f"removed the scratch directories of {counted(builds, 'unfinished environment build')}")
