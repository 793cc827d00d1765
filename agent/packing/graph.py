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
from agent.packing.repomap import load_symbols, state_digest
from agent.packing.symbols import FileSymbols

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


def _base_weight(name: str, definer_count: int) -> float:
    weight = 1.0
    # Long, compound names are specific; short and private ones connect everything to everything.
    if len(name) >= 8 and ("_" in name.strip("_") or (name != name.lower() and name != name.upper())):
        weight *= 10.0
    if name.startswith("_"):
        weight *= 0.1
    if definer_count > 5:
        weight *= 0.1
    return weight


def build_graph(symbols: list[FileSymbols | None]) -> ReferenceGraph:
    definers: dict[str, list[int]] = {}
    for index, file_symbols in enumerate(symbols):
        for name in file_symbols.definitions if file_symbols is not None else ():
            definers.setdefault(name, []).append(index)
    names = sorted(definers)
    name_ids = {name: position for position, name in enumerate(names)}
    # C-level maps over all references at once: a Python loop per reference would cost most of a warm run.
    words_per_file = [file_symbols.references.split() if file_symbols is not None else [] for file_symbols in symbols]
    words = list(itertools.chain.from_iterable(words_per_file))
    count = len(words) // 2
    files = numpy.repeat(numpy.arange(len(symbols)), [len(file_words) // 2 for file_words in words_per_file])
    used = numpy.fromiter(map(name_ids.get, words[0::2], itertools.repeat(-1)), dtype=numpy.int64, count=count)
    counts = numpy.fromiter(map(int, words[1::2]), dtype=numpy.float64, count=count)
    # A name only its own file defines links that file to nothing else.
    sole_definer = numpy.array([definers[name][0] if len(definers[name]) == 1 else -1 for name in names] + [-1])
    keep = (used >= 0) & (sole_definer[used] != files)
    return ReferenceGraph(
        file_count=len(symbols),
        names=names,
        definer_names=numpy.array([name_ids[name] for name in names for _ in definers[name]], dtype=numpy.int64),
        definer_files=numpy.array([index for name in names for index in definers[name]], dtype=numpy.int64),
        name_weights=numpy.array([_base_weight(name, len(definers[name])) for name in names], dtype=numpy.float64),
        edge_files=files[keep],
        edge_names=used[keep],
        edge_counts=counts[keep],
    )


def _save(path: Path, graph: ReferenceGraph) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
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
    repo_dir: Path, files: list[TextFile], cache_dir: Path, collected: dict[str, FileSymbols]
) -> ReferenceGraph:
    """The graph of these files: stored, or built from their symbols (collected, cached, or extracted now)."""
    path = cache_dir / "graphs" / f"{state_digest(files, GRAPH_VERSION)}.npz"
    graph = _load(path)
    if graph is None:
        graph = build_graph(load_symbols(repo_dir, files, cache_dir, collected))
        _save(path, graph)
    return graph
