"""Which files matter most: a personalized PageRank over the definition/reference graph, biased by the task.

Like Aider's repo map, but deterministic: every collection is iterated in sorted order and ties break by path,
so the same repository and task give the same order in every process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy

from agent.packing.symbols import FileSymbols

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


def _identifier_weight(name: str, definer_count: int, hints: TaskHints) -> float:
    weight = 1.0
    if name in hints.identifiers:
        weight *= 10.0
    # Long, compound names are specific; short and private ones connect everything to everything.
    if len(name) >= 8 and ("_" in name.strip("_") or (name != name.lower() and name != name.upper())):
        weight *= 10.0
    if name.startswith("_"):
        weight *= 0.1
    if definer_count > 5:
        weight *= 0.1
    return weight


def _personalization(
    paths: list[str], tags: list[FileSymbols | None], hints: TaskHints, named: set[int]
) -> list[float]:
    """Where a random walk restarts: half uniformly, half on the files the task points at (when it does)."""
    pointed = []
    for index, path in enumerate(paths):
        weight = 0.0
        if index in named:
            weight += TASK_PATH_WEIGHT
        stem = _stem(path).lower()
        if len(stem) >= 3 and stem in hints.words:
            weight += TASK_NAME_WEIGHT
        file_tags = tags[index]
        if file_tags is not None and hints.identifiers.intersection(file_tags.definitions):
            weight += TASK_DEFINITION_WEIGHT
        pointed.append(weight)
    uniform = 1.0 / len(paths)
    total = sum(pointed)
    if total == 0.0:
        return [uniform] * len(paths)
    return [TASK_SHARE * weight / total + (1.0 - TASK_SHARE) * uniform for weight in pointed]


def pagerank_scores(paths: list[str], tags: list[FileSymbols | None], hints: TaskHints, named: set[int]) -> list[float]:
    definers: dict[str, list[int]] = {}
    for index, file_tags in enumerate(tags):
        for name in file_tags.definitions if file_tags is not None else ():
            definers.setdefault(name, []).append(index)
    names = sorted(definers)
    name_ids = {name: position for position, name in enumerate(names)}
    name_weights = numpy.array([_identifier_weight(name, len(definers[name]), hints) for name in names])
    # Each file spreads its rank over the names it uses (weighted), each name evenly over the files defining it.
    edge_files: list[int] = []
    edge_names: list[int] = []
    edge_counts: list[str] = []
    for index, file_tags in enumerate(tags):
        if file_tags is None:
            continue
        words = file_tags.references.split()
        for name_id, count in zip(map(name_ids.get, words[0::2]), words[1::2], strict=True):
            if name_id is not None:
                edge_files.append(index)
                edge_names.append(name_id)
                edge_counts.append(count)
    files_array = numpy.array(edge_files, dtype=numpy.int64)
    names_array = numpy.array(edge_names, dtype=numpy.int64)
    sole_definer = numpy.array([definers[name][0] if len(definers[name]) == 1 else -1 for name in names])
    keep = sole_definer[names_array] != files_array if len(names_array) else numpy.zeros(0, dtype=bool)
    files_array, names_array = files_array[keep], names_array[keep]
    weights = name_weights[names_array] * numpy.sqrt(numpy.array(edge_counts, dtype=numpy.float64)[keep])
    totals = numpy.bincount(files_array, weights=weights, minlength=len(tags))
    shares = weights / totals[files_array] if len(weights) else weights
    definer_names = [name_id for name_id, name in enumerate(names) for _ in definers[name]]
    definer_files = [index for name in names for index in definers[name]]
    definer_shares = [1.0 / len(definers[name]) for name in names for _ in definers[name]]
    return _power_iteration(
        teleport=numpy.array(_personalization(paths, tags, hints, named)),
        edges=(files_array, names_array, shares),
        definitions=(
            numpy.array(definer_names, dtype=numpy.int64),
            numpy.array(definer_files, dtype=numpy.int64),
            numpy.array(definer_shares),
        ),
        name_count=len(name_ids),
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


def rank_files(paths: list[str], tags: list[FileSymbols | None], task: str | None) -> list[int]:
    """Indices into paths, most relevant first: files the task names, then by PageRank, ties by path."""
    hints = TaskHints.parse(task)
    named = named_files(paths, hints)
    scores = pagerank_scores(paths, tags, hints, named)
    return sorted(range(len(paths)), key=lambda index: (index not in named, -scores[index], paths[index]))
