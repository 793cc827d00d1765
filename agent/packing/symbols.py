"""Definitions and references per file, for ranking: regular expressions over the bytes, no parsing.

Ranking needs every file's names, so this runs over the whole repository; a syntax tree there costs seconds
per megabyte of source on one core (tree-sitter holds the GIL), patterns a small fraction of that. The
tree-sitter grammars still draw the outlines (outline.py), which only the files that get one need. A pattern
can take a `def` inside a string for a definition: the ranking tolerates that, and it stays a pure function
of the bytes, cached per blob id.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

IDENTIFIER = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
JS_NAME = rb"([A-Za-z_$][\w$]*)"
JS_MODIFIERS = rb"(?:(?:public|private|protected|static|async|readonly|abstract|override|declare|get|set)[ \t]+)*"
JAVA_MODIFIERS = rb"(?:(?:public|private|protected|static|final|abstract|synchronized|native|default)[ \t]+)+"
_JS_DEFINITIONS = (
    rb"\b(?:class|interface|enum|namespace)[ \t]+" + JS_NAME,
    rb"\btype[ \t]+" + JS_NAME + rb"[ \t]*(?:<[^>\n]*>)?[ \t]*=",
    rb"\bfunction\b[ \t]*\*?[ \t]*" + JS_NAME,
    rb"\b(?:const|let|var)[ \t]+" + JS_NAME + rb"[ \t]*(?::[^=\n]+)?=[ \t]*(?:async[ \t]+)?"
    rb"(?:function\b|\([^)\n]*\)[^=\n]*=>|[A-Za-z_$][\w$]*[ \t]*=>)",
    # Methods and interface method signatures; control keywords followed by a parenthesis are filtered out.
    rb"^[ \t]+" + JS_MODIFIERS + rb"\*?[ \t]*" + JS_NAME + rb"[ \t]*(?:<[^>\n]*>)?\([^)\n]*\)"
    rb"(?:[ \t]*(?::[^{;\n]+)?\{|[ \t]*:[^{;\n]+;)",
)
DEFINITION_PATTERNS: dict[str, tuple[bytes, ...]] = {
    "python": (
        rb"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_]\w*)",
        rb"^([A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?=(?!=)",  # module-level assignments, annotated or not
    ),
    "javascript": _JS_DEFINITIONS,
    "typescript": _JS_DEFINITIONS,
    "tsx": _JS_DEFINITIONS,
    "go": (
        rb"^func[ \t]*(?:\([^)\n]*\)[ \t]*)?([A-Za-z_]\w*)",
        rb"^(?:type|var|const)[ \t]+([A-Za-z_]\w*)",
    ),
    "rust": (
        rb"\b(?:fn|struct|enum|trait|type|mod|union|const|static)[ \t]+([A-Za-z_]\w*)",
        rb"\bmacro_rules![ \t]*([A-Za-z_]\w*)",
        rb"\bimpl\b(?:[ \t]*<[^>\n]*>)?[ \t]+(?:[\w:]+[ \t]+for[ \t]+)?([A-Za-z_]\w*)",
    ),
    "java": (
        rb"\b(?:class|interface|enum|record)[ \t]+([A-Za-z_$][\w$]*)",
        rb"^[ \t]+" + JAVA_MODIFIERS + rb"[^=;()\n]*?\b([A-Za-z_$][\w$]*)[ \t]*\(",
    ),
}
NOT_NAMES = frozenset({b"if", b"for", b"while", b"switch", b"catch", b"with", b"return", b"function", b"new"})
_COMPILED = {
    language: tuple(re.compile(pattern, re.MULTILINE) for pattern in patterns)
    for language, patterns in DEFINITION_PATTERNS.items()
}


@dataclass(frozen=True, slots=True)
class FileSymbols:
    definitions: tuple[str, ...]  # sorted, unique
    references: str  # "name count name count ...", sorted by name: compact until the ranking reads it

    def to_json(self) -> list[object]:
        return [list(self.definitions), self.references]

    @classmethod
    def from_json(cls, value: list[object]) -> FileSymbols:
        definitions, references = value
        return cls(tuple(definitions), str(references))  # type: ignore[arg-type]

    def reference_counts(self) -> list[tuple[str, int]]:
        words = self.references.split()
        return [(name, int(count)) for name, count in zip(words[::2], words[1::2], strict=True)]


def extract_symbols(language: str, data: bytes) -> FileSymbols:
    """Names the file defines, and every identifier-shaped word with its count (a name in a docstring links too)."""
    names: set[bytes] = set()
    for pattern in _COMPILED[language]:
        names.update(pattern.findall(data))
    names -= NOT_NAMES
    references = Counter(IDENTIFIER.findall(data))
    encoded = " ".join(f"{name.decode('ascii')} {count}" for name, count in sorted(references.items()))
    return FileSymbols(tuple(sorted(name.decode("ascii") for name in names)), encoded)
