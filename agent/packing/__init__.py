"""Packs a whole repository into the model's context: every text file when it fits, a ranked selection when not.

Exports load on first use (PEP 562): importing the package (as `refactor-agent --help` does) costs nothing until
a pack is asked for.

- cli.py: `refactor-agent pack`: exactly the repository text the agent puts in its system message;
- packer.py: the one packer `pack` and `run` share: list, classify, count, map, rank, select;
- options.py: what a caller can ask of the packer;
- budget.py: how many tokens the repository may take;
- listing.py: which paths exist, according to git;
- inventory.py: every listed path, judged packable or excluded with a reason;
- classify.py: whether a path is packable text, by its content;
- languages.py: which language a file is written in;
- churn.py: how long each file has gone unchanged;
- symbols.py: definitions and references per file, by regular expressions;
- graph.py: the reference graph between files;
- rank.py: which files matter most for the task (personalized PageRank);
- repomap.py: symbols and outlines per blob, cached;
- outline.py: outlines drawn with tree-sitter grammars (their queries in queries/*.scm);
- select.py: a token budget filled in rank order;
- render.py: the text the model sees;
- tokens.py: token counts, exact or estimated;
- server_tokens.py: exact counts from llama-server's /tokenize;
- full_costs.py: what each file costs shown whole;
- cache.py: on-disk maps keyed by content;
- workers.py: a cold pack's per-file work over the machine's cores;
- stats.py: the pack's stats JSON.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.packing.listing import RepoGit
    from agent.packing.options import PackError, PackOptions
    from agent.packing.packer import PackedRepository, pack_repository
    from agent.packing.stats import FileStat, PackStats

_EXPORTS = {
    "FileStat": "agent.packing.stats",
    "PackError": "agent.packing.options",
    "PackOptions": "agent.packing.options",
    "PackStats": "agent.packing.stats",
    "PackedRepository": "agent.packing.packer",
    "RepoGit": "agent.packing.listing",
    "pack_repository": "agent.packing.packer",
}
__all__ = ["FileStat", "PackError", "PackOptions", "PackStats", "PackedRepository", "RepoGit", "pack_repository"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'agent.packing' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
