"""Which files matter most: a personalized PageRank over the definition/reference graph, biased by the task.

Like Aider's repo map, but deterministic: every collection is iterated in sorted order and ties break by path,
so the same repository and task give the same order in every process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy

from agent.packing.graph import ReferenceGraph

DAMPING = 0.85
MAX_ITERATIONS = 50
TOLERANCE = 1e-9
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
PATH_LIKE = re.compile(r"[\w.\-/]+")
AMBIGUOUS_BASENAME = 3  # a base name matching more files than this is a hint, not a pointer to one file
TASK_SHARE = 0.5  # of the restart probability, given to files the task points at
TASK_PATH_WEIGHT = 10.0
TASK_NAME_WEIGHT = 2.0
TASK_DEFINITION_WEIGHT = 5.0
TASK_IDENTIFIER_FACTOR = 10.0  # a name the task mentions weighs this much more as a link


def _basename(path: str) -> str:
    # String operations, not PurePosixPath: these run for every file of the repository.
    return path.rpartition("/")[2]


def _stem(path: str) -> str:
    stem, dot, _ = _basename(path).rpartition(".")
    return stem if dot and stem else _basename(path)


@dataclass(frozen=True, slots=True)
class TaskHints:
    identifiers: frozenset[str]
    words: frozenset[str]  # path-like tokens, lower-cased

    @classmethod
    def parse(cls, task: str | None) -> TaskHints:
        text = task or ""
        return cls(
            frozenset(IDENTIFIER.findall(text)), frozenset(w.strip("./-").lower() for w in PATH_LIKE.findall(text))
        )


def named_files(paths: list[str], hints: TaskHints) -> set[int]:
    """Files the task points at: their whole path, or a base name few files share."""
    by_basename: dict[str, list[int]] = {}
    for index, path in enumerate(paths):
        by_basename.setdefault(_basename(path).lower(), []).append(index)
    named = {index for index, path in enumerate(paths) if path.lower() in hints.words}
    for basename, indices in by_basename.items():
        if "." in basename and basename in hints.words and len(indices) <= AMBIGUOUS_BASENAME:
            named.update(indices)
    return named


def _personalization(paths: list[str], graph: ReferenceGraph, hints: TaskHints, named: set[int]) -> numpy.ndarray:
    """Where a random walk restarts: half uniformly, half on the files the task points at (when it does)."""
    defining = graph.files_defining(hints.identifiers)
    pointed = []
    for index, path in enumerate(paths):
        weight = 0.0
        if index in named:
            weight += TASK_PATH_WEIGHT
        stem = _stem(path).lower()
        if len(stem) >= 3 and stem in hints.words:
            weight += TASK_NAME_WEIGHT
        if index in defining:
            weight += TASK_DEFINITION_WEIGHT
        pointed.append(weight)
    uniform = 1.0 / len(paths)
    total = sum(pointed)
    if total == 0.0:
        return numpy.full(len(paths), uniform)
    return numpy.array([TASK_SHARE * weight / total + (1.0 - TASK_SHARE) * uniform for weight in pointed])


def pagerank_scores(paths: list[str], graph: ReferenceGraph, hints: TaskHints, named: set[int]) -> list[float]:
    """Each file spreads its rank over the names it uses (weighted), each name evenly over the files defining it."""
    name_weights = graph.name_weights.copy()
    name_weights[graph.name_ids(hints.identifiers)] *= TASK_IDENTIFIER_FACTOR
    weights = name_weights[graph.edge_names] * numpy.sqrt(graph.edge_counts)
    totals = numpy.bincount(graph.edge_files, weights=weights, minlength=graph.file_count)
    shares = weights / totals[graph.edge_files] if len(weights) else weights
    definer_counts = numpy.bincount(graph.definer_names, minlength=len(graph.names))
    return _power_iteration(
        teleport=_personalization(paths, graph, hints, named),
        edges=(graph.edge_files, graph.edge_names, shares),
        definitions=(graph.definer_names, graph.definer_files, 1.0 / definer_counts[graph.definer_names]),
        name_count=len(graph.names),
    ).tolist()


def _power_iteration(
    *,
    teleport: numpy.ndarray,
    edges: tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray],
    definitions: tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray],
    name_count: int,
) -> numpy.ndarray:
    """PageRank through name nodes. bincount sums in array order, so results are identical run to run."""
    edge_files, edge_names, edge_shares = edges
    definer_names, definer_files, definer_shares = definitions
    file_count = len(teleport)
    dangling = numpy.ones(file_count, dtype=bool)
    dangling[edge_files] = False
    rank = teleport.copy()
    for _ in range(MAX_ITERATIONS):
        name_mass = numpy.bincount(edge_names, weights=rank[edge_files] * edge_shares, minlength=name_count)
        received = numpy.bincount(
            definer_files, weights=name_mass[definer_names] * definer_shares, minlength=file_count
        )
        updated = (1.0 - DAMPING + DAMPING * rank[dangling].sum()) * teleport + DAMPING * received
        change = numpy.abs(updated - rank).sum()
        rank = updated
        if change < TOLERANCE:
            break
    return rank


def rank_files(paths: list[str], graph: ReferenceGraph, task: str | None) -> list[int]:
    """Indices into paths, most relevant first: files the task names, then by PageRank, ties by path."""
    hints = TaskHints.parse(task)
    named = named_files(paths, hints)
    scores = pagerank_scores(paths, graph, hints, named)
    return sorted(range(len(paths)), key=lambda index: (index not in named, -scores[index], paths[index]))
