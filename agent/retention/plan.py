"""The bounds applied, store by store, each through the store's own prune function; this module only gathers what
each would remove, removes it (unless it is a dry run) and says per thing what went and what stayed and why.

What it may touch: run directories in the runs directory, refactor-agent's private refs in the repositories
(refs/refactor-agent/wip/ and history/), scratch directories of processes that have ended, baselines, saved
prefixes and the environment images of the repositories it looked into. Never a branch, a working tree, an index or
HEAD of the user's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from agent.gate.baseline import BaselineCache
from agent.nights import history
from agent.protocol.config import RetentionConfig
from agent.record.prune import RunRecordFate, remove_run_record, run_record_fates
from agent.review.records import ReviewError
from agent.review.repository import UserRepository, user_repository
from agent.safety.printable import counted
from agent.server.kv_store import KVCacheStore
from agent.worktree.leftovers import (
    BUILD_SCRATCH_PREFIX,
    HOOKS_SCRATCH_PREFIX,
    SCRATCH_PREFIX,
    remove_run_scratch,
    stale_scratch,
)
from agent.worktree.safe_git import GitError
from sandbox.errors import SandboxError


class ImagePruner(Protocol):
    """Where a run's environment images are: the Docker daemon (agent/run/sandboxes.py), or nowhere."""

    def prune_images(self, keep: int, *, repositories: set[str], dry_run: bool) -> tuple[list[str], dict[str, str]]: ...


Kind = Literal["run", "wip refs", "history ref", "scratch directory", "baseline", "saved prefix", "environment image"]
NOUNS: dict[Kind, tuple[str, str]] = {  # one, several: as gc's last line counts them
    "run": ("run", "runs"),
    "wip refs": ("set of wip refs", "sets of wip refs"),
    "history ref": ("history ref", "history refs"),
    "scratch directory": ("scratch directory", "scratch directories"),
    "baseline": ("baseline", "baselines"),
    "saved prefix": ("saved prefix", "saved prefixes"),
    "environment image": ("environment image", "environment images"),
}


@dataclass(frozen=True)
class Removal:
    kind: Kind
    name: str
    bytes: int | None
    why: str


@dataclass(frozen=True)
class Kept:
    kind: Kind
    name: str
    why: str


@dataclass
class Collection:
    dry_run: bool
    removed: list[Removal] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)


@dataclass(frozen=True)
class Stores:
    """Where the things that grow live."""

    runs_dir: Path
    prefix_dir: Path  # the servers' --slot-save-path
    scratch_root: Path | None = None  # None: the temporary directory
    repos: tuple[Path, ...] = ()  # more repositories than the run records name
    images: ImagePruner | None = None  # where environment images are (the run's sandboxes); None: nowhere


class Repositories:
    """The repositories gc looks into, each opened once; one that is gone or not a repository is passed over (an
    old run's repository may have been deleted since)."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self._stack = stack
        self._open: dict[Path, UserRepository | None] = {}
        self._branches: dict[Path, dict[str, str]] = {}

    def get(self, path: Path) -> UserRepository | None:
        path = path.resolve()
        if path not in self._open:
            try:
                self._open[path] = self._stack.enter_context(user_repository(path))
            except ReviewError:
                self._open[path] = None
        return self._open[path]

    def branch_tips(self, path: Path) -> dict[str, str]:
        repository = self.get(path)
        if repository is None:
            return {}
        if path.resolve() not in self._branches:
            self._branches[path.resolve()] = repository.task_branches()
        return self._branches[path.resolve()]

    def opened(self) -> Iterator[tuple[Path, UserRepository]]:
        yield from ((path, repository) for path, repository in self._open.items() if repository is not None)


def _runs(collection: Collection, fates: list[RunRecordFate]) -> None:
    for fate in fates:
        name = fate.path.name
        if fate.kept is not None:
            collection.kept.append(Kept("run", name, fate.kept))
        if not fate.goes:
            continue
        try:
            if not collection.dry_run:
                remove_run_record(fate.path)
            collection.removed.append(Removal("run", name, fate.bytes, "beyond the newest runs kept"))
        except OSError as error:
            collection.kept.append(Kept("run", name, f"not removed: {error}"))


def _wip_refs(collection: Collection, fates: list[RunRecordFate], repositories: Repositories) -> None:
    """The resume snapshots of runs this runs directory records as finished (or just removed); a run it has no
    record of may be another runs directory's, still to be resumed: its refs stay."""
    finished = {fate.path.name for fate in fates if not fate.resumable and fate.summary is not None}
    for path, repository in list(repositories.opened()):
        for run_id, refs in repository.wip_runs().items():
            if run_id not in finished:
                continue
            try:
                if not collection.dry_run:
                    repository.drop_wip(run_id)
                why = f"{counted(len(refs), 'resume snapshot')} of a finished run"
                collection.removed.append(Removal("wip refs", f"of run {run_id} in {path}", None, why))
            except GitError as error:
                collection.kept.append(Kept("wip refs", f"of run {run_id} in {path}", str(error)))


def _history(collection: Collection, keep: int, repositories: Repositories) -> None:
    """A night's earlier results beyond the newest `keep` of each task (nights/history.py)."""
    for path, repository in list(repositories.opened()):
        try:
            removed = history.prune(repository.git, keep, dry_run=collection.dry_run)
        except GitError as error:
            collection.kept.append(Kept("history ref", f"in {path}", str(error)))
            continue
        why = f"beyond the newest {keep} of its task"
        collection.removed += [Removal("history ref", f"{ref} in {path}", None, why) for ref in removed]


def _scratch(collection: Collection, root: Path | None) -> None:
    kinds = (
        (SCRATCH_PREFIX, "a run"),
        (BUILD_SCRATCH_PREFIX, "an environment build"),
        (HOOKS_SCRATCH_PREFIX, "a command's hooks folder"),
    )
    for prefix, what in kinds:
        for directory, record in stale_scratch(root=root, prefix=prefix):
            if not collection.dry_run:
                remove_run_scratch(directory, record.git_dir)
            collection.removed.append(
                Removal("scratch directory", str(directory), None, f"{what} whose process has ended")
            )


def _baselines(collection: Collection, runs_dir: Path, older_than_s: float) -> None:
    days = older_than_s / 86400
    for path, size in BaselineCache(runs_dir).prune(older_than_s, dry_run=collection.dry_run):
        collection.removed.append(Removal("baseline", path.name, size, f"older than {days:g} days"))


def _prefixes(collection: Collection, directory: Path, cap_bytes: int) -> None:
    if not directory.is_dir():
        return
    gib = cap_bytes / 2**30
    for entry in KVCacheStore(directory).evict_to(cap_bytes, dry_run=collection.dry_run):
        why = f"least recently used, to stay under {gib:g} GiB"
        collection.removed.append(Removal("saved prefix", entry.digest, entry.bytes, why))


def _images(collection: Collection, keep: int, repositories: set[str], images: ImagePruner) -> None:
    """Environment images beyond the newest `keep` of each repository gc looked into; other repositories' images
    (another runs directory's, another user's) are not this runs directory's to bound."""
    try:
        removed, kept = images.prune_images(keep, repositories=repositories, dry_run=collection.dry_run)
    except SandboxError as error:
        collection.kept.append(Kept("environment image", "", f"Docker is not reachable: {error}"))
        return
    why = f"beyond the newest {keep} of its repository"
    collection.removed += [Removal("environment image", tag, None, why) for tag in removed]
    collection.kept += [Kept("environment image", tag, reason) for tag, reason in kept.items()]


def collect_garbage(bounds: RetentionConfig, stores: Stores, *, dry_run: bool) -> Collection:
    """Apply the bounds (or, dry_run, only say what they would remove)."""
    collection = Collection(dry_run=dry_run)
    with contextlib.ExitStack() as stack:
        repositories = Repositories(stack)
        for path in stores.repos:
            repositories.get(path)
        fates = run_record_fates(stores.runs_dir, bounds.keep_runs, repositories.branch_tips)
        for summary in (fate.summary for fate in fates if fate.summary is not None):
            for repo in summary.repos or [summary.repo]:  # each repository a run worked on, before its record goes
                repositories.get(Path(repo))
        _runs(collection, fates)
        _wip_refs(collection, fates, repositories)
        _history(collection, bounds.keep_history, repositories)
        names = {path.name for path, _ in repositories.opened()}
    _scratch(collection, stores.scratch_root)
    _baselines(collection, stores.runs_dir, bounds.keep_baselines_s)
    _prefixes(collection, stores.prefix_dir, bounds.prefix_cache_bytes)
    if names and stores.images is not None:
        _images(collection, bounds.keep_images, names, stores.images)
    return collection


def _size(count: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def collection_lines(collection: Collection) -> list[str]:
    """One line per thing removed (or, a dry run, that would be) and kept, then the totals."""
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
