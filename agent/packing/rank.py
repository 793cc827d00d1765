"""Which files matter most: a personalized PageRank over the definition/reference graph, biased by the task.

Like Aider's repo map, but deterministic: every collection is iterated in sorted order and ties break by path,
so the same repository and task give the same order in every process.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from agent.packing.tags import FileTags

DAMPING = 0.85
MAX_ITERATIONS = 50
TOLERANCE = 1e-9
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
PATH_LIKE = re.compile(r"[\w.\-/]+")
AMBIGUOUS_BASENAME = 3  # a base name matching more files than this is a hint, not a pointer to one file
TASK_PATH_WEIGHT = 100.0
TASK_NAME_WEIGHT = 10.0
TASK_DEFINITION_WEIGHT = 5.0


@dataclass(frozen=True, slots=True)
class TaskHints:
    identifiers: frozenset[str]
    words: frozenset[str]  # path-like tokens, lower-cased

    @classmethod
    def parse(cls, task: str | None) -> TaskHints:
        text = task or ""
        return cls(frozenset(IDENTIFIER.findall(text)), frozenset(w.strip("./-").lower() for w in PATH_LIKE.findall(text)))


def named_files(paths: list[str], hints: TaskHints) -> set[int]:
    """Files the task points at: their whole path, or a base name few files share."""
    by_basename: dict[str, list[int]] = {}
    for index, path in enumerate(paths):
        by_basename.setdefault(PurePosixPath(path).name.lower(), []).append(index)
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


def _personalization(paths: list[str], tags: list[FileTags | None], hints: TaskHints, named: set[int]) -> list[float]:
    weights = []
    for index, path in enumerate(paths):
        weight = 1.0
        if index in named:
            weight += TASK_PATH_WEIGHT
        stem = PurePosixPath(path).stem.lower()
        if len(stem) >= 3 and stem in hints.words:
            weight += TASK_NAME_WEIGHT
        file_tags = tags[index]
        if file_tags is not None and hints.identifiers.intersection(file_tags.definitions):
            weight += TASK_DEFINITION_WEIGHT
        weights.append(weight)
    total = sum(weights)
    return [weight / total for weight in weights]


def pagerank_scores(paths: list[str], tags: list[FileTags | None], hints: TaskHints, named: set[int]) -> list[float]:
    definers: dict[str, list[int]] = {}
    for index, file_tags in enumerate(tags):
        for name in file_tags.definitions if file_tags is not None else ():
            definers.setdefault(name, []).append(index)
    names = sorted(definers)
    name_ids = {name: position for position, name in enumerate(names)}
    # Each file spreads its rank over the names it uses (weighted), each name evenly over the files defining it.
    outgoing: list[list[tuple[int, float]]] = []
    for index, file_tags in enumerate(tags):
        edges = []
        for name, count in file_tags.references if file_tags is not None else ():
            defining = definers.get(name)
            if defining is None or defining == [index]:
                continue
            edges.append((name_ids[name], _identifier_weight(name, len(defining), hints) * math.sqrt(count)))
        total = sum(weight for _, weight in edges)
        outgoing.append([(name_id, weight / total) for name_id, weight in edges])
    name_definers = [definers[name] for name in names]
    teleport = _personalization(paths, tags, hints, named)
    rank = list(teleport)
    for _ in range(MAX_ITERATIONS):
        name_mass = [0.0] * len(names)
        dangling = 0.0
        for index, edges in enumerate(outgoing):
            mass = rank[index]
            if not edges:
                dangling += mass
                continue
            for name_id, share in edges:
                name_mass[name_id] += mass * share
        updated = [(1.0 - DAMPING + DAMPING * dangling) * weight for weight in teleport]
        for name_id, files in enumerate(name_definers):
            share = DAMPING * name_mass[name_id] / len(files)
            for index in files:
                updated[index] += share
        change = sum(abs(new - old) for new, old in zip(updated, rank, strict=True))
        rank = updated
        if change < TOLERANCE:
            break
    return rank


def rank_files(paths: list[str], tags: list[FileTags | None], task: str | None) -> list[int]:
    """Indices into paths, most relevant first: files the task names, then by PageRank, ties by path."""
    hints = TaskHints.parse(task)
    named = named_files(paths, hints)
    scores = pagerank_scores(paths, tags, hints, named)
    return sorted(range(len(paths)), key=lambda index: (index not in named, -scores[index], paths[index]))
