"""Which language a file is written in, judged by its name (the outline grammars and symbol patterns key on it)."""

from __future__ import annotations

LANGUAGE_BY_SUFFIX = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".jsx": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
}


def language_for(path: str) -> str | None:
    # String operations, not PurePosixPath: this runs for every file of the repository.
    name = path.rpartition("/")[2]
    stem, dot, suffix = name.rpartition(".")
    if not dot or not stem:
        return None
    return LANGUAGE_BY_SUFFIX.get("." + suffix.lower())
