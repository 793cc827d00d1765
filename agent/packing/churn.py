"""How long each file has gone unchanged, from git's history: the packer shows long-stable files first.

A saved or resident KV cache helps only up to the first byte that changed. Files ordered by path put an edit to
`a/` in front of everything in `z/`; ordered by churn, the files untouched for longest come first and the ones
edited lately last, so an edit re-prefills only the churned tail. The order is a function of the commit (plus
the work tree's uncommitted changes, which count as the newest), so it is deterministic for a commit. When the
repository does not fit, which files are shown changes too, at the margin of the ranking: within one age, the
files a task-free ranking puts first come first (Django 5.1.x releases, 1M budget: 7.5% of the prefix kept
without this, see docs/benchmarks.md).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

from agent.packing.cache import PACK_CACHE_FILE, ContentCache
from agent.packing.listing import ListedPath, RepoGit
from agent.packing.options import PackError

COMMIT_MARK = b"\x01"
READ_CHUNK_BYTES = 1024 * 1024
# Files per rank band (see rank_bands): the band of the top-ranked files stays the same from one commit to the next.
RANK_BAND = 64
# A file no commit of the walk touched (untracked, or changed in the work tree) sorts after every committed one.
NEWEST = -1
# The pack's tiers end after the files unchanged for at least this many commits: a saved prefix is kept at each
# end (agent/server/kv_cache.py), so a later commit that changed only newer files re-prefills only its tail.
TIER_AGES = (1000, 100, 10)


def _log_arguments(commit: str) -> list[str]:
    # Only names are read: no signatures checked, no renames followed, no diff drivers or colour from config.
    return [
        "-c",
        "log.showSignature=false",
        "log",
        "--no-color",
        "--no-renames",
        "--no-ext-diff",
        "--name-only",
        "-z",
        "--format=%x01",
        commit,
        "--",
    ]


def commits_since_change(git: RepoGit, commit: str, paths: set[str]) -> dict[str, int]:
    """For each of `paths`, how many commits back from `commit` (in `git log` order) last touched it. Reading
    stops once every path was found: a long history is walked only as far back as its stablest file."""
    ages: dict[str, int] = {}
    try:
        process = git.popen(
            *_log_arguments(commit), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
    except FileNotFoundError as exc:
        raise PackError("git is not installed (needed to order the repository's files)") from exc
    assert process.stdout is not None
    age = -1
    pending = b""
    try:
        while len(ages) < len(paths):
            chunk = process.stdout.read(READ_CHUNK_BYTES)
            if not chunk:
                break
            *records, pending = (pending + chunk).split(b"\0")
            for record in records:
                if record == COMMIT_MARK:
                    age += 1
                    continue
                # The first name after a commit's line starts with the newline that ends it.
                display = ListedPath(raw=record.removeprefix(b"\n"), mode=None).display
                if display in paths and display not in ages:
                    ages[display] = age
    finally:
        process.kill()
        process.communicate()
    return ages


class ChurnOrder:
    """Sort keys for shown files: long unchanged first, then by path; cached per commit."""

    def __init__(self, cache_dir: Path) -> None:
        # A table of the pack's cache file (churn.sqlite once): written in the pack's one transaction.
        self._cache = ContentCache(cache_dir / PACK_CACHE_FILE, "churn")

    def ages(self, git: RepoGit, commit: str | None, paths: Iterable[str], modified: set[bytes]) -> dict[str, int]:
        """`modified`: listing.modified_paths of the repository, whose files count as just changed."""
        wanted = set(paths)
        if commit is None:
            return {}
        cached = self._cache.get_many([commit]).get(commit, {})
        missing = wanted - cached.keys()
        if missing:
            cached = {**cached, **commits_since_change(git, commit, missing)}
            # Paths the walk never met (untracked ones) are remembered too, so a warm run walks nothing.
            cached.update(dict.fromkeys(wanted - cached.keys(), NEWEST))
            self._cache.put(commit, cached)
        changed = {ListedPath(raw=raw, mode=None).display for raw in modified}
        return {path: NEWEST if path in changed else cached.get(path, NEWEST) for path in wanted}

    def close(self) -> None:
        self._cache.close()


def rank_bands(paths: list[str], ranked: list[int]) -> dict[str, int]:
    """Each file's band of RANK_BAND places in a task-free ranking: bands, not places, so that two files swapping
    places between commits leave the order alone unless they cross a band's edge."""
    return {paths[index]: place // RANK_BAND for place, index in enumerate(ranked)}


def churn_key(ages: dict[str, int], bands: dict[str, int], path: str) -> tuple[int, int, str]:
    """Oldest last change first (more commits ago); within an age the better-ranked band first (a pack that does
    not fit; one that fits has no bands); then by path. Never-committed files last."""
    age = ages.get(path, NEWEST)
    return (-age if age != NEWEST else 1, bands.get(path, 0), path)


def tier_ends(ages: dict[str, int], shown: list[str]) -> list[int]:
    """How many of the `shown` files (in churn order: oldest last change first) each tier of TIER_AGES holds, from
    the stablest; a tier that adds no file, or holds every file, ends nowhere."""
    counts = [sum(1 for path in shown if ages.get(path, NEWEST) >= age) for age in TIER_AGES]
    return sorted({count for count in counts if 0 < count < len(shown)})
