"""The one packer `pack` and `run` share: list, classify, count, and when over budget map, rank and select."""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

from agent.packing.budget import resolve_budget
from agent.packing.cache import PACK_CACHE_FILE, one_commit
from agent.packing.churn import ChurnOrder, churn_key, rank_bands, tier_ends
from agent.packing.classify import ExcludedFile, SelectionFlags, TextFile, read_text
from agent.packing.full_costs import FullCosts
from agent.packing.inventory import take_inventory
from agent.packing.languages import language_for
from agent.packing.listing import RepoGit, checked_work_tree, linguist_attributes, list_paths, modified_paths
from agent.packing.options import PackError, PackOptions, resolved_cache_dir
from agent.packing.render import RENDERING, Renderer, renderer_for
from agent.packing.repomap import Outlines, Rankings, SymbolCollector, symbols_of
from agent.packing.select import Candidate, View, fill_budget
from agent.packing.server_tokens import ServerCounter
from agent.packing.stats import FileStat, PackStats, timed
from agent.packing.tokens import Calibration, CountRequest, EstimatingCounter, TokenCounter, piece_key

WRAPPER_BYTES = 40  # rough size of a file's opening and closing lines, for estimates made without rendering
# Bare path lines are estimated with the tokens per byte of the list of every path (counted once per commit),
# then the list shown is counted and checked: a selection's list differs from the whole one by a few percent.
PATH_ESTIMATE_MARGIN = 1.05
# Rounds that correct a selection made on estimates share this limit with the rounds that absorb seams.
MAX_SELECTION_ROUNDS = 24
MAX_CORRECTION_ROUNDS = 8  # Django takes 3 (6 without the margin below)
# The first exact counts also take the files ranked next after those the estimates let in, up to this share of the
# budget by estimate: estimates err by ~10% for the top-ranked files, and the files that exact counts let in then
# are counted in the same round instead of a round each. Chosen on estimates and ranks alone, as cold as warm.
CORRECTION_MARGIN = 0.15
# Estimated to take at most this share of the budget, a repository is counted whole (exactly) before any ranking:
# estimates err by a few percent, and a repository that fits should not be cut because of an estimate.
LIKELY_FITS = 1.1
# Outlines parsed, then counted, together: a batch keeps every core parsing and a few /tokenize requests in
# flight, and costs little beyond the last outline the budget takes.
OUTLINE_BATCH = 64
# From this many listed files on, the ranking's modules (numpy) load while the workers read: such repositories
# are the ones likely not to fit, and a small one would wait for an import it may not need.
PREFETCH_MIN_FILES = 1000


def make_counter(server_url: str | None, cache_dir: Path, *, concurrency: int) -> TokenCounter:
    """The server's exact counts when there is a server, else estimates at the last ratio measured on one."""
    if server_url is None:
        return EstimatingCounter(Calibration(cache_dir).load())
    return ServerCounter(server_url, cache_dir, concurrency=concurrency)


def _import_ranking() -> None:
    importlib.import_module("agent.packing.graph")
    importlib.import_module("agent.packing.rank")


def _next_in_rank(ranked: list[int], views: dict[int, View], costs: list[int], room: int) -> list[int]:
    """Files not shown whole, in rank order, while their estimated costs fit in room (a file too large alone for
    it is passed over: the selection could not take it for the room it frees either)."""
    taken = []
    for index in ranked:
        if views[index] != "full" and costs[index] <= room:
            taken.append(index)
            room -= costs[index]
    return taken


@dataclass(frozen=True, slots=True)
class ShownFile:
    file: TextFile
    view: Literal["full", "outline"]
    outline: str | None


# A tier boundary is worth a saved prefix of its own only this far (a share of the pack's text) from the previous one
# and from the end: two files of nearly the same prefix cost their disk twice for a few files' prefill.
MIN_TIER_SHARE = 0.05


class PackedRepository:
    """The selection, rendered on demand: write() streams file by file, reading each from disk as it goes.
    `tier_ends`: after how many of the shown files a churn tier ends (see `boundaries`)."""

    def __init__(
        self,
        *,
        repo_dir: Path,
        renderer: Renderer,
        partial: bool,
        shown: list[ShownFile],
        unshown: list[str],
        stats: PackStats,
        tier_ends: list[int] | None = None,
    ) -> None:
        self._repo_dir = repo_dir
        self._renderer = renderer
        self._partial = partial
        self._shown = shown
        self._unshown = unshown
        self.stats = stats
        self._tier_ends = tier_ends or []
        self._text: str | None = None
        self._boundaries: list[int] = []

    def write(self, stream: TextIO) -> None:
        if self._text is not None:  # rendered already (counted exactly): write what was counted
            stream.write(self._text)
            return
        with timed(self.stats, "render"):
            for piece in self._pieces():
                stream.write(piece)

    def _pieces(self) -> Iterator[str]:
        """The text in the renderer's pieces: header, each file shown, the unshown list's lines, footer."""
        renderer = self._renderer
        yield renderer.header(partial=self._partial)
        for item in self._shown:
            if item.view == "full":
                yield renderer.full(item.file.path, read_text(self._repo_dir, item.file))
            else:
                yield renderer.outline(item.file.path, item.outline or "")
        if self._unshown:
            yield renderer.unshown_open()
            yield from (renderer.unshown_line(path) for path in self._unshown)
            yield renderer.unshown_close()
        yield renderer.footer(self.stats.commit)

    def count(self, counter: TokenCounter) -> int:
        """The text's count (the pieces let the counter send it in chunks at once); keeps the text for write().
        Rendering is timed with the counting that needs it."""
        pieces = self._keep(list(self._pieces()))
        return counter.count_joined(pieces)

    @property
    def text(self) -> str:
        if self._text is None:
            with timed(self.stats, "render"):
                self._keep(list(self._pieces()))
        assert self._text is not None
        return self._text

    @property
    def boundaries(self) -> list[int]:
        """Character offsets into `text` where a tier of the churn order ends (the files unchanged for at least
        1000, 100, 10 commits: churn.TIER_AGES), at least MIN_TIER_SHARE of the text apart and from its end;
        ascending, at most three. A commit that changes only newer files leaves the text before them as it was."""
        _ = self.text
        return self._boundaries

    def _keep(self, pieces: list[str]) -> list[str]:
        """Keeps the rendered text and where its tiers end (pieces: the header, then one per shown file)."""
        self._text = "".join(pieces)
        ends: list[int] = []
        offset, minimum = 0, MIN_TIER_SHARE * len(self._text)
        for count in self._tier_ends:
            end = sum(len(piece) for piece in pieces[: 1 + count])
            if end - offset >= minimum and len(self._text) - end >= minimum:
                ends.append(end)
                offset = end
        self._boundaries = ends
        return pieces


class _LazyOutlines:
    """Outlines and their costs, made a batch at a time in rank order, the first time the selection asks."""

    def __init__(
        self,
        order: list[int],
        source: Outlines,
        count: Callable[[dict[int, str]], dict[int, int]],
        stats: PackStats,
    ) -> None:
        self._order = order  # indices of files that may have an outline, most relevant first
        self._position = {index: position for position, index in enumerate(order)}
        self._source = source
        self._count = count
        self._stats = stats
        self.texts: dict[int, str] = {}
        self.costs: dict[int, int | None] = {}

    def may_have(self, index: int) -> bool:
        return index in self._position

    def cost(self, index: int) -> int | None:
        if index not in self.costs:
            start = self._position[index]
            batch = [later for later in self._order[start : start + OUTLINE_BATCH] if later not in self.costs]
            upcoming = self._order[start + OUTLINE_BATCH : start + 2 * OUTLINE_BATCH]
            with timed(self._stats, "outline"):
                texts = {later: text for later, text in self._source.get_many(batch, upcoming).items() if text}
            with timed(self._stats, "count"):
                counted = self._count(texts)
            self.costs.update((later, counted.get(later)) for later in batch)
            self.texts.update(texts)
        return self.costs[index]

    def close(self) -> None:
        self._source.close()


def pack_repository(repo_dir: Path, options: PackOptions, git: RepoGit | None = None) -> PackedRepository:
    """`git`: how to reach the repository's git (RepoGit); a checkout of the user's own by default."""
    started = time.perf_counter()
    repo_dir = Path(repo_dir).resolve()
    git = git or RepoGit.of_checkout(repo_dir)
    commit = checked_work_tree(repo_dir, git)
    budget = resolve_budget(options)
    cache_dir = resolved_cache_dir(options)
    # What the pack learns (facts, symbols, outlines, rankings, ages, counts) is one transaction, at its end.
    with one_commit(cache_dir / PACK_CACHE_FILE):
        counter = make_counter(options.server_url, cache_dir, concurrency=options.tokenize_concurrency)
        try:
            packer = _Packer(repo_dir, git, options, counter, cache_dir)
            packer.stats.commit = commit
            packer.stats.budget_tokens = budget.tokens
            packer.stats.budget_source = budget.source
            packed = packer.pack(budget.tokens)
        finally:
            counter.close()
    packed.stats.elapsed_s["setup"] = round(time.perf_counter() - started - sum(packed.stats.elapsed_s.values()), 4)
    return packed


class _Packer:
    def __init__(
        self, repo_dir: Path, git: RepoGit, options: PackOptions, counter: TokenCounter, cache_dir: Path
    ) -> None:
        self.repo_dir = repo_dir
        self.git = git
        self.options = options
        self.counter = counter
        self.cache_dir = cache_dir
        self.renderer = renderer_for(options.format)
        self.ages: dict[str, int] = {}  # commits since each file last changed; empty: shown in path order
        self.bands: dict[str, int] = {}  # rank bands, when the repository does not fit
        self.modified: set[bytes] = set()  # tracked paths whose file may differ from the index, listed once
        self._paths: list[str] = []  # of the files listed, once a selection is made
        self._candidates: list[Candidate] | None = None  # in rank order, kept across selection rounds
        self.stats = PackStats(
            commit=None,
            format=options.format,
            counts="exact" if counter.exact else "estimated",
            tokenizer=counter.tokenizer,
            tokens_per_byte=counter.tokens_per_byte,
            budget_tokens=None,
            budget_source="",
        )

    def pack(self, budget: int | None) -> PackedRepository:
        # Without a budget nothing is ever ranked, so symbols are not worth extracting while reading.
        collector = SymbolCollector() if budget is not None else None
        files, excluded = self._inventory(collector)
        if self.options.order == "churn":
            with timed(self.stats, "order"):
                order = ChurnOrder(self.cache_dir)
                try:
                    paths = [text_file.path for text_file in files]
                    self.ages = order.ages(self.git, self.stats.commit, paths, self.modified)
                finally:
                    order.close()
        with timed(self.stats, "count"):
            costs = self._full_costs(files)
            header = self.counter.count_text(self.renderer.header(partial=False))
            footer = self.counter.count_text(self.renderer.footer(self.stats.commit))
        if budget is None or collector is None or header + footer + costs.total() <= budget * LIKELY_FITS:
            # Every file would be shown: count them all exactly, and see whether they really fit.
            with timed(self.stats, "count"):
                costs.count_exactly(range(len(files)))
            full_costs = costs.values
            whole = self._result(
                files, excluded, dict.fromkeys(range(len(files)), "full"), full_costs, {}, {}, 0, False
            )
            if (
                budget is None
                or collector is None
                or (whole.stats.total_tokens <= budget and self._fits(whole, budget))
            ):
                return whole
        ranked = self._rank(files, collector, self.options.task)
        if self.ages:
            # Which files a selection shows changes from commit to commit at its margin (a file turns from whole to
            # outline): the files the task-free ranking puts first come first within their age, the marginal ones
            # after them. Task-free, so every task on a commit orders alike.
            general = ranked if self.options.task is None else self._rank(files, collector, None)
            self.bands = rank_bands([text_file.path for text_file in files], general)
        # Outlines and their counts depend on the files alone: made once for every round.
        paths = self._paths = [text_file.path for text_file in files]
        lazy_outlines = _LazyOutlines(
            [index for index in ranked if language_for(paths[index]) is not None],
            Outlines(self.repo_dir, files, self.cache_dir),
            lambda texts: self._count_outlines(files, texts),
            self.stats,
        )
        try:
            return self._settle(files, excluded, ranked, costs, budget, lazy_outlines)
        finally:
            lazy_outlines.close()

    def _settle(
        self,
        files: list[TextFile],
        excluded: list[ExcludedFile],
        ranked: list[int],
        costs: FullCosts,
        budget: int,
        lazy_outlines: _LazyOutlines,
    ) -> PackedRepository:
        """Selects until what is shown whole was counted exactly and the whole text fits. Pieces are counted apart;
        inside the whole text their edges can tokenize together with their neighbours'. With exact counts the whole
        is counted too, and the selection shrinks until it fits."""
        seams = corrections = 0
        list_counted = False  # the list of unshown paths is counted exactly once the selection stops changing
        for _ in range(MAX_SELECTION_ROUNDS):
            views, outlines, outline_costs, unshown_cost = self._select(
                files, ranked, costs.values, budget - seams, lazy_outlines, count_list=list_counted
            )
            shown_whole = [index for index, view in views.items() if view == "full"]
            if not corrections:
                shown_whole += _next_in_rank(ranked, views, costs.values, int(budget * CORRECTION_MARGIN))
            with timed(self.stats, "count"):
                corrected = costs.count_exactly(shown_whole)
            if corrected:
                # Chosen on estimates: select again with the exact counts of what it shows, which may not fit, or
                # leave room for more. Done once a selection shows nothing whole that was not counted exactly;
                # should that take too long, every file is counted (what this packer did before estimating).
                corrections += 1
                list_counted = False
                if corrections >= MAX_CORRECTION_ROUNDS:
                    with timed(self.stats, "count"):
                        costs.count_exactly(range(len(files)))
                continue
            if not list_counted:
                # Settled on the list's estimate (a margin over its tokens): the same selection again, now with the
                # list counted exactly, shrinking should it not fit.
                list_counted = True
                continue
            packed = self._result(files, excluded, views, costs.values, outlines, outline_costs, unshown_cost, True)
            pieces = packed.stats.total_tokens
            if self._fits(packed, budget):
                return packed
            # The pieces of the next selection get at most what this one's seams left of the budget: this one no
            # longer qualifies, so every round changes the selection (adding only the overshoot could repeat
            # the same selection for as many rounds as its seams have tokens).
            whole = packed.stats.total_tokens
            seams = max(seams + whole - budget, whole - pieces)
        raise PackError(f"no selection fits {budget} tokens after {MAX_SELECTION_ROUNDS} rounds (the budget is tiny)")

    def _fits(self, packed: PackedRepository, budget: int) -> bool:
        """With exact counts, replace the sum of the pieces by the count of the whole text, then compare."""
        if self.counter.exact:
            with timed(self.stats, "count"):
                packed.stats.total_tokens = packed.count(self.counter)
        return packed.stats.total_tokens <= budget

    def _inventory(self, collector: SymbolCollector | None) -> tuple[list[TextFile], list[ExcludedFile]]:
        with timed(self.stats, "list"):
            listed = list_paths(self.repo_dir, self.git, include_untracked=self.options.include_untracked)
            linguist = linguist_attributes(self.git, listed) if not self.options.include_generated else {}
            # Once per pack: the inventory trusts no index blob of these, the churn order counts them as just changed.
            self.modified = modified_paths(self.repo_dir, self.git)
        flags = SelectionFlags(
            include_generated=self.options.include_generated,
            include_secrets=self.options.include_secrets,
            max_file_bytes=self.options.max_file_bytes,
        )
        with timed(self.stats, "read"):
            extract = symbols_of if collector is not None else None
            prefetch = _import_ranking if collector is not None and len(listed) >= PREFETCH_MIN_FILES else None
            inventory = take_inventory(
                self.repo_dir, listed, linguist, self.modified, flags, self.cache_dir, extract, prefetch
            )
            if collector is not None:
                collector.keep(inventory.extracted)
            return inventory.files, inventory.excluded

    def _full_costs(self, files: list[TextFile]) -> FullCosts:
        renderer, repo_dir, fmt = self.renderer, self.repo_dir, self.options.format

        def request(text_file: TextFile) -> CountRequest:
            return CountRequest(
                key=piece_key(text_file.blob_id, fmt, RENDERING, "full", text_file.path),
                render=lambda: renderer.full(text_file.path, read_text(repo_dir, text_file)),
                size_hint=text_file.size + len(text_file.path) + WRAPPER_BYTES,
            )

        return FullCosts(self.counter, files, [request(text_file) for text_file in files])

    def _rank(self, files: list[TextFile], collector: SymbolCollector, task: str | None) -> list[int]:
        """Indices of files, most relevant first; the same files and task were perhaps ranked before."""
        rankings = Rankings(self.cache_dir)
        try:
            with timed(self.stats, "rank"):
                key = rankings.key(files, task)
                ranked = rankings.get(key)
            if ranked is not None:
                return ranked
            # lazy: numpy and the graph load only for a repository that does not fit and was not ranked for this task
            from agent.packing.graph import reference_graph
            from agent.packing.rank import rank_files

            with timed(self.stats, "map"):
                graph = reference_graph(self.repo_dir, files, self.cache_dir, collector)
            with timed(self.stats, "rank"):
                ranked = rank_files([text_file.path for text_file in files], graph, task)
            rankings.put(key, ranked)
            return ranked
        finally:
            rankings.close()

    def _select(
        self,
        files: list[TextFile],
        ranked: list[int],
        full_costs: list[int],
        budget: int,
        outlines: _LazyOutlines,
        *,
        count_list: bool,
    ) -> tuple[dict[int, View], dict[int, str], dict[int, int], int]:
        """Views that fit budget; count_list: the list of unshown paths counted exactly (else its estimate)."""
        paths = self._paths
        with timed(self.stats, "count"):
            fixed = sum(
                self.counter.count_text(piece)
                for piece in (self.renderer.header(partial=True), self.renderer.footer(self.stats.commit))
            )
            list_wrapper = self.counter.count_text(self.renderer.unshown_open() + self.renderer.unshown_close())
        if self._candidates is None:
            path_costs = self._path_costs(paths)
            self._candidates = [
                Candidate(index, full_costs[index], outlines.may_have(index), path_costs[index]) for index in ranked
            ]
        else:  # a round later only the files counted since have new costs
            self._candidates = [
                candidate
                if candidate.full == full_costs[candidate.index]
                else candidate._replace(full=full_costs[candidate.index])
                for candidate in self._candidates
            ]
        candidates = self._candidates
        selecting = time.perf_counter()
        nested = self.stats.elapsed_s.get("outline", 0.0) + self.stats.elapsed_s["count"]
        # Path lines are estimates: count the resulting list exactly, and shrink until the total fits.
        shortfall = 0
        for _ in range(MAX_SELECTION_ROUNDS):
            views = fill_budget(candidates, max(0, budget - fixed - list_wrapper - shortfall), outlines.cost)
            unshown = [paths[index] for index in range(len(files)) if views[index] == "path"]
            if count_list:
                with timed(self.stats, "count"):
                    unshown_cost = self._unshown_cost(unshown, list_wrapper)
            else:  # the estimates fill_budget kept within the budget
                listed = sum(candidate.path for candidate in candidates if views[candidate.index] == "path")
                unshown_cost = list_wrapper + listed if unshown else 0
            shown_cost = sum(
                full_costs[index] if view == "full" else outlines.costs[index] or 0
                for index, view in views.items()
                if view in ("full", "outline")
            )
            overshoot = fixed + shown_cost + unshown_cost - budget
            if overshoot <= 0:
                break
            shortfall += overshoot
        # Outlines are made and counted inside the selection: those phases are timed apart. Over every round.
        nested = self.stats.elapsed_s.get("outline", 0.0) + self.stats.elapsed_s["count"] - nested
        selected = self.stats.elapsed_s.get("select", 0.0) + time.perf_counter() - selecting - nested
        self.stats.elapsed_s["select"] = round(selected, 4)
        shown_outlines = {index: outlines.texts[index] for index, view in views.items() if view == "outline"}
        outline_costs = {index: outlines.costs[index] or 0 for index in shown_outlines}
        return views, shown_outlines, outline_costs, unshown_cost

    def _path_costs(self, paths: list[str]) -> list[int]:
        """Estimated tokens of each path's line in the list of unshown files, with the tokens per byte of the list
        of every path (counted once: paths tokenize unlike code, with their slashes, underscores and dots)."""
        lines = [self.renderer.unshown_line(path) for path in paths]
        sizes = [len(line.encode("utf-8", errors="surrogatepass")) for line in lines]
        with timed(self.stats, "count"):
            ratio = self.counter.count_joined(lines) / max(1, sum(sizes)) * PATH_ESTIMATE_MARGIN
        return [math.ceil(size * ratio) for size in sizes]

    def _count_outlines(self, files: list[TextFile], outlines: dict[int, str]) -> dict[int, int]:
        renderer, fmt = self.renderer, self.options.format
        indices = sorted(outlines)

        def request(index: int) -> CountRequest:
            path, outline = files[index].path, outlines[index]
            return CountRequest(
                key=piece_key(files[index].blob_id, fmt, RENDERING, "outline", path),
                render=lambda: renderer.outline(path, outline),
                size_hint=len(outline.encode()) + len(path) + WRAPPER_BYTES,
            )

        return dict(zip(indices, self.counter.count([request(index) for index in indices]), strict=True))

    def _unshown_cost(self, unshown: list[str], list_wrapper: int) -> int:
        if not unshown:
            return 0
        return list_wrapper + self.counter.count_joined([self.renderer.unshown_line(path) for path in unshown])

    def _result(
        self,
        files: list[TextFile],
        excluded: list[ExcludedFile],
        views: dict[int, View],
        full_costs: list[int],
        outlines: dict[int, str],
        outline_costs: dict[int, int],
        unshown_cost: int,
        partial: bool,
    ) -> PackedRepository:
        stats = self.stats
        # After the selection: outlines counted during it refine the measured ratio.
        stats.tokens_per_byte = self.counter.tokens_per_byte
        shown: list[ShownFile] = []
        unshown: list[str] = []
        file_stats: list[FileStat] = []
        for index, text_file in enumerate(files):
            view = views[index]
            rendered = {"full": full_costs[index], "outline": outline_costs.get(index, 0)}.get(view, 0)
            reason = {
                "outline": "over budget: outline only",
                "path": "over budget: path only",
                "dropped": "over budget: not even its path fits",
            }.get(view)
            if view in ("full", "outline"):
                shown.append(ShownFile(text_file, view, outlines.get(index)))  # type: ignore[arg-type]
            elif view == "path":
                unshown.append(text_file.path)
            stat_view = "excluded" if view == "dropped" else view
            file_stats.append(
                FileStat(
                    path=text_file.path,
                    view=stat_view,  # type: ignore[arg-type]
                    reason=reason,
                    bytes=text_file.size,
                    tokens_full=full_costs[index],
                    tokens_rendered=rendered,
                )
            )
        ends: list[int] = []
        if self.ages:
            shown.sort(key=lambda item: churn_key(self.ages, self.bands, item.file.path))
            ends = tier_ends(self.ages, [item.file.path for item in shown])
        file_stats.extend(FileStat(path=item.path, view="excluded", reason=item.reason) for item in excluded)
        file_stats.sort(key=lambda stat: stat.path)
        stats.files = file_stats
        stats.files_listed = len(files) + len(excluded)
        stats.files_full = sum(1 for stat in file_stats if stat.view == "full")
        stats.files_outline = sum(1 for stat in file_stats if stat.view == "outline")
        stats.files_path_only = len(unshown)
        stats.files_excluded = sum(1 for stat in file_stats if stat.view == "excluded")
        fixed = self.counter.count_text(self.renderer.header(partial=partial))
        fixed += self.counter.count_text(self.renderer.footer(stats.commit))
        stats.total_tokens = fixed + sum(stat.tokens_rendered for stat in file_stats) + unshown_cost
        return PackedRepository(
            repo_dir=self.repo_dir,
            renderer=self.renderer,
            partial=partial,
            shown=shown,
            unshown=unshown,
            stats=stats,
            tier_ends=ends,
        )
