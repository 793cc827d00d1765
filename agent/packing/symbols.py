"""Definitions and references per file, for ranking: regular expressions over the bytes, no parsing.

Ranking needs every file's names, so this runs over the whole repository; a syntax tree there costs seconds
per megabyte of source on one core (tree-sitter holds the GIL), patterns a small fraction of that. The
tree-sitter grammars still draw the outlines (outline.py), which only the files that get one need. A pattern
can take a `def` inside a string for a definition: the ranking tolerates that, and it stays a pure function
of the bytes, cached per blob id.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from dataclasses import dataclass

# Linear in the line's length, whatever the line: a run is taken whole (possessive `*+`, atomic `(?>...)`) where
# nothing after it could start with what it took, so the engine never retries the ways to split one run of blanks
# between two quantifiers (one 100 KB line of spaces in a JavaScript file took minutes that way). Patterns that may
# start anywhere in a line (`\b`) scan at most MAX_SPAN bytes for a type, parameter list or annotation, so a line
# of many such starts costs each only that: a definition whose parts run longer is not found, and the ranking
# does without it.
MAX_SPAN = 160


def _up_to(stop: bytes, least: int = 0) -> bytes:
    """Up to MAX_SPAN bytes of one line before the first of `stop`, taken whole."""
    return rb"[^" + stop + rb"\n]{%d,%d}+" % (least, MAX_SPAN)


JS_NAME = rb"([A-Za-z_$][\w$]*+)"
# A JavaScript modifier may be the name itself (`get (key) {`), so the engine may give modifiers back: each retry
# fails at once, as the next byte starts another word. Java's are reserved words, never a name: taken whole.
JS_MODIFIERS = rb"(?:(?:public|private|protected|static|async|readonly|abstract|override|declare|get|set)[ \t]++)*"
JAVA_MODIFIERS = rb"(?>(?:(?:public|private|protected|static|final|abstract|synchronized|native|default)[ \t]++)+)"
_JS_DEFINITIONS = (
    rb"\b(?:class|interface|enum|namespace)[ \t]++" + JS_NAME,
    rb"\btype[ \t]++" + JS_NAME + rb"[ \t]*+(?:<" + _up_to(b">") + rb">[ \t]*+)?=",
    rb"\bfunction\b[ \t]*+(?:\*[ \t]*+)?" + JS_NAME,
    rb"\b(?:const|let|var)[ \t]++" + JS_NAME + rb"[ \t]*+(?::" + _up_to(b"=", 1) + rb")?=[ \t]*+(?:async[ \t]++)?"
    rb"(?:function\b|\(" + _up_to(b")") + rb"\)" + _up_to(b"=") + rb"=>|[A-Za-z_$][\w$]*+[ \t]*+=>)",
    # Methods and interface method signatures; control keywords followed by a parenthesis are filtered out.
    rb"\n[ \t]++" + JS_MODIFIERS + rb"(?:\*[ \t]*+)?" + JS_NAME + rb"[ \t]*+(?:<[^>\n]*+>)?\([^)\n]*+\)"
    rb"(?:[ \t]*+(?::[^{;\n]++)?\{|[ \t]*+:[^{;\n]++;)",
)
DEFINITION_PATTERNS: dict[str, tuple[bytes, ...]] = {
    "python": (
        rb"\n[ \t]*+(?:async[ \t]++)?(?:def|class)[ \t]++([A-Za-z_]\w*+)",
        rb"\n([A-Za-z_]\w*+)[ \t]*+(?::[^=\n]*+)?=(?!=)",  # module-level assignments, annotated or not
    ),
    "javascript": _JS_DEFINITIONS,
    "typescript": _JS_DEFINITIONS,
    "tsx": _JS_DEFINITIONS,
    "go": (
        rb"\nfunc[ \t]*+(?:\([^)\n]*+\)[ \t]*+)?([A-Za-z_]\w*+)",
        rb"\n(?:type|var|const)[ \t]++([A-Za-z_]\w*+)",
    ),
    "rust": (
        rb"\b(?:fn|struct|enum|trait|type|mod|union|const|static)[ \t]++([A-Za-z_]\w*+)",
        rb"\bmacro_rules![ \t]*+([A-Za-z_]\w*+)",
        rb"\bimpl\b(?:[ \t]*+<" + _up_to(b">") + rb">)?[ \t]++(?:[\w:]++[ \t]++for[ \t]++)?([A-Za-z_]\w*+)",
    ),
    "java": (
        rb"\b(?:class|interface|enum|record)[ \t]++([A-Za-z_$][\w$]*+)",
        rb"\n[ \t]++" + JAVA_MODIFIERS + rb"[^=;()\n]*?\b([A-Za-z_$][\w$]*+)[ \t]*+\(",
    ),
}
NOT_NAMES = frozenset({b"if", b"for", b"while", b"switch", b"catch", b"with", b"return", b"function", b"new"})
_COMPILED = {language: tuple(map(re.compile, patterns)) for language, patterns in DEFINITION_PATTERNS.items()}
# Bytes that end an identifier: with every other byte turned into a space, a split finds the identifiers (less
# the digits a word may start with) far faster than a pattern would.
_NOT_IDENTIFIER = bytes(
    byte if chr(byte).isascii() and (chr(byte).isalnum() or chr(byte) == "_") else ord(" ") for byte in range(256)
)


@dataclass(frozen=True, slots=True)
class FileSymbols:
    definitions: tuple[str, ...]  # sorted, unique
    # Every identifier-shaped word, sorted, and how often each occurs: "name name ..." and "count count ...",
    # compact until the graph reads them (it parses all files' counts in one numpy call).
    references: str
    counts: str

    def to_json(self) -> list[object]:
        return [list(self.definitions), self.references, self.counts]

    @classmethod
    def from_json(cls, value: list[object]) -> FileSymbols:
        definitions, references, counts = value
        return cls(tuple(definitions), str(references), str(counts))  # type: ignore[arg-type]

    def reference_counts(self) -> list[tuple[str, int]]:
        return list(zip(self.references.split(), map(int, self.counts.split()), strict=True))


def extract_symbols(language: str, data: bytes) -> FileSymbols:
    """Names the file defines, and every identifier-shaped word with its count (a name in a docstring links too)."""
    # A line start is written "\n" in the patterns, not a multiline "^", so the engine can jump from newline to
    # newline instead of trying every position; hence the newline before the first line.
    lines = b"\n" + data
    names: set[bytes] = set()
    for pattern in _COMPILED[language]:
        names.update(pattern.findall(lines))
    names -= NOT_NAMES
    references = Counter(data.translate(_NOT_IDENTIFIER).decode("ascii").split())
    ordered = sorted(references)
    # An identifier starts at its first letter or underscore. Digits sort first, so the words that start with
    # one lead the order: only they need trimming.
    digit_led = bisect.bisect_left(ordered, "A")
    for word in ordered[:digit_led]:
        count = references.pop(word)
        name = word.lstrip("0123456789")
        if name:
            if name not in references:
                bisect.insort(ordered, name)
            references[name] += count
    del ordered[:digit_led]
    return FileSymbols(
        tuple(sorted(name.decode("ascii") for name in names)),
        " ".join(ordered),
        " ".join([str(references[name]) for name in ordered]),
    )
