"""`refactor-agent pack`: print exactly the repository text the agent puts in its system message."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

from agent.commands import failure
from agent.packing import PackedRepository, PackError, PackOptions, pack_repository
from agent.packing.options import FileOrder
from agent.protocol.effort import Effort


def _summary(packed: PackedRepository) -> str:
    stats = packed.stats
    budget = "no budget" if stats.budget_tokens is None else f"budget {stats.budget_tokens}"
    return (
        f"{stats.total_tokens} tokens ({stats.counts}, {budget}): {stats.files_full} files in full, "
        f"{stats.files_outline} as outlines, {stats.files_path_only} by path, {stats.files_excluded} excluded "
        f"of {stats.files_listed} listed; {sum(stats.elapsed_s.values()):.2f} s"
    )


def pack(
    repo: Annotated[Path, typer.Argument(help="The git repository (its checked-out files as git lists them).")],
    budget: Annotated[
        int | None, typer.Option(min=0, help="Token budget [default: the server's window minus reserves]")
    ] = None,
    server: Annotated[
        str | None, typer.Option(help="llama-server URL for exact counts and the window size [default: estimate]")
    ] = None,
    task: Annotated[str | None, typer.Option(help="Biases the selection when the repository does not fit.")] = None,
    format: Annotated[Literal["xml", "markdown"], typer.Option("--format", help="Rendering.")] = "xml",
    order: Annotated[
        FileOrder, typer.Option(help="churn: files unchanged longest first (an edit keeps the prefix before it cached)")
    ] = "churn",
    output: Annotated[Path | None, typer.Option(help="Write the text here instead of stdout.")] = None,
    stats: Annotated[Path | None, typer.Option(help="Write the stats JSON here.")] = None,
    include_untracked: Annotated[bool, typer.Option(help="Also untracked files that are not ignored.")] = False,
    include_generated: Annotated[
        bool, typer.Option(help="Also vendored, minified, generated and lock files, and LFS pointers.")
    ] = False,
    include_secrets: Annotated[bool, typer.Option(help="Also files that likely hold credentials.")] = False,
    effort: Annotated[Effort, typer.Option(help="Reasoning effort: sizes the output reserve.")] = "max",
) -> None:
    """Pack REPO into one text: every file when it fits, else a ranked selection with outlines."""
    options = PackOptions(
        budget_tokens=budget,
        task=task,
        server_url=server,
        format=format,
        order=order,
        include_untracked=include_untracked,
        include_generated=include_generated,
        include_secrets=include_secrets,
        effort=effort,
    )
    try:
        packed = pack_repository(repo, options)
        if output is None:
            packed.write(sys.stdout)
            sys.stdout.flush()
        else:
            with output.open("w", encoding="utf-8", newline="") as stream:
                packed.write(stream)
        if stats is not None:
            stats.write_text(packed.stats.model_dump_json(indent=1) + "\n", encoding="utf-8")
    except BrokenPipeError:
        # The reader (`| head`) left: not an error of ours. Point stdout at nothing so the exit flush is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None
    except PackError as error:
        raise failure(str(error)) from None
    except OSError as error:
        raise failure(f"{error.filename or ''}: {error.strerror}") from None
    typer.echo(_summary(packed), err=True)
