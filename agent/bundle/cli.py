"""`refactor-agent bundle DIR`: an install that crosses an air gap, made on a connected machine (make.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from agent.commands import EXIT_FAILED, failure
from agent.safety.printable import printable
from sandbox.models import DEFAULT_IMAGE


def bundle(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="A new or empty folder to write the bundle into.")],
    llama_wheel: Annotated[
        Path | None, typer.Option(help="A llama-server wheel built on site (CUDA) instead of this machine's CPU build.")
    ] = None,
    wheel: Annotated[
        Path | None, typer.Option(help="refactor-agent's own wheel (default: built from this source tree).")
    ] = None,
    image: Annotated[
        list[str] | None,
        typer.Option(metavar="IMAGE", help=f"An image to carry; repeat it (default: {DEFAULT_IMAGE})."),
    ] = None,
) -> None:
    """Write into DIR everything an install needs behind an air gap; there, `bash DIR/install.sh` installs it."""
    # lazy: docker-py and the bundle's steps load for this command only, not for every other one's start-up
    from agent.bundle.make import BUNDLE_LOG, BundleError, BundleRequest, make_bundle
    from agent.bundle.steps import StepFailed

    started = time.monotonic()
    request = BundleRequest(
        directory=directory, project_wheel=wheel, llama_wheel=llama_wheel, images=image or [DEFAULT_IMAGE]
    )
    try:
        make_bundle(request, lambda line: typer.echo(printable(line)))
    except BundleError as error:
        raise failure(printable(str(error), one_line=True)) from None
    except StepFailed as error:
        typer.echo(f"bundle: error: {printable(str(error))}", err=True)
        for line in error.tail:
            typer.echo(f"  {printable(line, one_line=True)}", err=True)
        raise typer.Exit(EXIT_FAILED) from None
    target = directory.absolute()
    size = sum(path.stat().st_size for path in target.rglob("*") if path.is_file())
    typer.echo(
        printable(
            f"bundle: done in {time.monotonic() - started:.0f}s, {size / 1e6:.0f} MB in {target}; "
            f"carry it over, then there: bash {target}/install.sh (log: {target / BUNDLE_LOG})"
        )
    )
