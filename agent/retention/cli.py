"""`refactor-agent gc`: the bounds of what grows every night applied now, one line per thing removed or kept."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from agent.commands import one_line_errors
from agent.retention.plan import Stores, collect_garbage, collection_lines
from agent.safety.printable import printable
from agent.server.paths import default_kv_cache_dir
from agent.settings.cli import ConfigOption, given_options
from agent.settings.layers import ConfigFiles, SettingsError, retention_config
from agent.settings.options import takes_options
from agent.settings.runs_dir import DEFAULT_RUNS_DIR, runs_dir_to_read
from agent.worktree.workspace import WorkspaceError, open_repository


@takes_options("gc")
def gc(
    context: typer.Context,
    runs_dir: Annotated[
        Path | None,
        typer.Option(help=f"Run records (default: {DEFAULT_RUNS_DIR}, else the per-user runs folder)."),
    ] = None,
    repo: Annotated[
        list[Path] | None,
        typer.Option(help="A repository to look into besides those the run records name; repeat for more."),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")] = False,
    prefix_dir: Annotated[
        Path | None, typer.Option(help="The servers' --slot-save-path (default: the one the launcher gives them).")
    ] = None,
    config: ConfigOption = None,
    **options: Any,
) -> None:
    """Remove what grows every night beyond its bound: finished run records beyond --keep-runs (never one that can be
    resumed, nor the record of a branch still holding its commit), resume snapshots of finished runs, scratch
    directories of processes that have ended, old baselines, saved prefixes over their cap. Never a branch, a
    working tree or a checkout. Bounds not given here come from the config files, as a night's do."""
    with one_line_errors(SettingsError, WorkspaceError, shown=printable):
        repos = [Path(str(open_repository(path.resolve()).working_tree_dir)) for path in repo or []]
        bounds = retention_config([*ConfigFiles(config).layers(repos, typer.echo), given_options(context)])
    # lazy: docker-py loads when gc runs, not with every command of the command line
    from agent.run.sandboxes import DockerSandboxes

    stores = Stores(
        runs_dir=runs_dir_to_read(runs_dir),
        prefix_dir=prefix_dir or default_kv_cache_dir(),
        repos=tuple(repos),
        images=DockerSandboxes(),
    )
    for line in collection_lines(collect_garbage(bounds, stores, dry_run=dry_run)):
        typer.echo(printable(line))
