"""The reference graph: which files define which names, and how often each file uses names others define.

It depends on the files' symbols and nothing task-specific, so it is stored per state of the repository (a
digest of every path and blob id): a warm run, or a new task on the same commit, loads a few arrays instead of
every file's symbols, and re-weights them for its task in milliseconds.
"""

from __future__ import annotations

import bisect
import itertools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy

from agent.packing.classify import TextFile
from agent.packing.repomap import SymbolCollector, load_symbols, state_digest
from agent.packing.symbols import FileSymbols
from agent.safety.private_dirs import private_dir

GRAPH_VERSION = "graph_v1"  # bump when the graph's construction or weights change
KEEP_GRAPHS = 16  # graphs of the most recently packed repository states kept on disk


@dataclass(frozen=True)
class ReferenceGraph:
    file_count: int
    names: list[str]  # sorted
    definer_names: numpy.ndarray  # (name id, file id) pairs, by name then file
    definer_files: numpy.ndarray
    name_weights: numpy.ndarray  # per name, before the task's bias
    edge_files: numpy.ndarray  # a file using a name some other file defines...
    edge_names: numpy.ndarray
    edge_counts: numpy.ndarray  # ...this many times

    def name_ids(self, names: frozenset[str]) -> list[int]:
        """Ids of those of the names some file defines."""
        found = ((bisect.bisect_left(self.names, name), name) for name in sorted(names))
        return [position for position, name in found if position < len(self.names) and self.names[position] == name]

    def files_defining(self, names: frozenset[str]) -> set[int]:
        return set(self.definer_files[numpy.isin(self.definer_names, self.name_ids(names))].tolist())


def _base_weights(names: list[str], definer_counts: list[int]) -> numpy.ndarray:
    """Per name: long, compound names are specific; short, private and widely defined ones connect everything
    to everything."""
    weights = numpy.ones(len(names))
    specific = [
        len(name) >= 8 and ("_" in name.strip("_") or (name != name.lower() and name != name.upper())) for name in names
    ]
    weights[numpy.array(specific, dtype=bool)] *= 10.0
    weights[numpy.array([name.startswith("_") for name in names], dtype=bool)] *= 0.1
    weights[numpy.array(definer_counts) > 5] *= 0.1
    return weights


def build_graph(symbols: list[FileSymbols | None]) -> ReferenceGraph:
    definers: dict[str, list[int]] = {}
    for index, file_symbols in enumerate(symbols):
        for name in file_symbols.definitions if file_symbols is not None else ():
            definers.setdefault(name, []).append(index)
    names = sorted(definers)
    name_ids = dict(zip(names, range(len(names)), strict=True))
    definer_lists = [definers[name] for name in names]
    definer_counts = [len(defining) for defining in definer_lists]
    # C-level maps over all references at once: a Python loop per reference would cost most of a warm run.
    present = [(index, file_symbols) for index, file_symbols in enumerate(symbols) if file_symbols is not None]
    words_per_file = [file_symbols.references.split() for _, file_symbols in present]
    words = list(itertools.chain.from_iterable(words_per_file))
    lengths = [len(file_words) for file_words in words_per_file]
    files = numpy.repeat(numpy.array([index for index, _ in present], dtype=numpy.int64), lengths)
    used = numpy.fromiter(map(name_ids.get, words, itertools.repeat(-1)), dtype=numpy.int64, count=len(words))
    joined_counts = " ".join(file_symbols.counts for _, file_symbols in present if file_symbols.counts)
    counts = numpy.fromstring(joined_counts, dtype=numpy.float64, sep=" ")
    # A name only its own file defines links that file to nothing else.
    sole_definer = numpy.array([defining[0] if len(defining) == 1 else -1 for defining in definer_lists] + [-1])
    keep = (used >= 0) & (sole_definer[used] != files)
    return ReferenceGraph(
        file_count=len(symbols),
        names=names,
        definer_names=numpy.repeat(numpy.arange(len(names), dtype=numpy.int64), definer_counts),
        definer_files=numpy.fromiter(itertools.chain.from_iterable(definer_lists), dtype=numpy.int64),
        name_weights=_base_weights(names, definer_counts),
        edge_files=files[keep],
        edge_names=used[keep],
        edge_counts=counts[keep],
    )


def _save(path: Path, graph: ReferenceGraph) -> None:
    private_dir(path.parent)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    with partial.open("wb") as stream:
        numpy.savez(
            stream,
            file_count=numpy.array([graph.file_count]),
            names=numpy.frombuffer("\n".join(graph.names).encode(), dtype=numpy.uint8),
            definer_names=graph.definer_names,
            definer_files=graph.definer_files,
            name_weights=graph.name_weights,
            edge_files=graph.edge_files,
            edge_names=graph.edge_names,
            edge_counts=graph.edge_counts,
        )
    os.replace(partial, path)  # concurrent packers see a whole file or none
    for stale in sorted(path.parent.glob("*.npz"), key=lambda file: file.stat().st_mtime)[:-KEEP_GRAPHS]:
        stale.unlink(missing_ok=True)


def _load(path: Path) -> ReferenceGraph | None:
    try:
        with numpy.load(path, allow_pickle=False) as stored:
            names = stored["names"].tobytes().decode()
            return ReferenceGraph(
                file_count=int(stored["file_count"][0]),
                names=names.split("\n") if names else [],
                definer_names=stored["definer_names"],
                definer_files=stored["definer_files"],
                name_weights=stored["name_weights"],
                edge_files=stored["edge_files"],
                edge_names=stored["edge_names"],
                edge_counts=stored["edge_counts"],
            )
    except (OSError, ValueError, KeyError):
        return None  # missing or unreadable: rebuilt from the symbols


def reference_graph(
    repo_dir: Path, files: list[TextFile], cache_dir: Path, collector: SymbolCollector
) -> ReferenceGraph:
    """The graph of these files: stored, or built from their symbols (collected, cached, or extracted now)."""
    path = cache_dir / "graphs" / f"{state_digest(files, GRAPH_VERSION)}.npz"
    graph = _load(path)
    if graph is None:
        graph = build_graph(load_symbols(repo_dir, files, cache_dir, collector))
        _save(path, graph)
    return graph
