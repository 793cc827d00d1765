"""The kind of a task (rename, move, API migration ...), for the merge rate per kind: the night file's `kind`, else
the first pattern of an ordered table that the task's words match."""

from __future__ import annotations

import re

from agent.protocol.config import TaskSpec

KINDS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern))
    for kind, pattern in (
        ("rename", r"^rename\b"),
        ("move", r"^(move|extract)\b"),
        ("api migration", r"\b(replace|migrate|upgrade|deprecat)"),
        ("typing", r"\btype (hints|annotations)\b"),
        ("warnings", r"\bwarnings?\b"),
        ("cleanup", r"\b(remove|delete|drop) (dead|unused)\b"),
        ("docs", r"\b(docstring|document)"),
    )
)


def kind_of(spec: TaskSpec) -> str:
    if spec.kind is not None:
        return spec.kind
    text = " ".join(spec.text.lower().split())
    return next((kind for kind, pattern in KINDS if pattern.search(text)), "other")
