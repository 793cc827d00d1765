"""`refactor-agent gc`: the bounds of what grows every night applied now, one line per thing removed or kept."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from agent.commands import one_line_errors
from agent.retention.plan import NOUNS, Collection, Stores, collect_garbage
from agent.safety.printable import counted, printable
from agent.server.paths import default_kv_cache_dir
from agent.settings.cli import ConfigOption, given_options
from agent.settings.layers import ConfigFiles, SettingsError, retention_config
from agent.settings.options import takes_options
from agent.settings.runs_dir import DEFAULT_RUNS_DIR, runs_dir_to_read
from agent.worktree.workspace import WorkspaceError, open_repository


def _size(count: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def _lines(collection: Collection) -> list[str]:
    verb = "would remove" if collection.dry_run else "removed"
    lines = []
    for removal in collection.removed:
        size = f" ({_size(removal.bytes)})" if removal.bytes is not None else ""
        lines.append(f"{verb} {removal.kind} {removal.name}{size}: {removal.why}")
    for kept in collection.kept:
        lines.append(
            f"kept {kept.kind} {kept.name}: {kept.why}" if kept.name else f"kept every {kept.kind}: {kept.why}"
        )
    totals = []
    for kind, (one, several) in NOUNS.items():
        removed = [removal for removal in collection.removed if removal.kind == kind]
        size = sum(removal.bytes or 0 for removal in removed)
        if removed:
            totals.append(counted(len(removed), one, several) + (f" ({_size(size)})" if size else ""))
    dry = "; nothing was removed (--dry-run)" if collection.dry_run else ""
    return [*lines, f"gc: {verb} {', '.join(totals) or 'nothing'}{dry}"]


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
    stores = Stores(
        runs_dir=runs_dir_to_read(runs_dir), prefix_dir=prefix_dir or default_kv_cache_dir(), repos=tuple(repos)
    )
    for line in _lines(collect_garbage(bounds, stores, dry_run=dry_run)):
        typer.echo(printable(line))
