"""Definitions (tree-sitter, queries/*.scm), references and an outline per file.

The grammars come from tree-sitter-language-pack 0.13.0, which ships them compiled (offline). A file's tags
depend only on its bytes and language, so they are cached per blob id.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from pathlib import PurePosixPath

import tree_sitter
import tree_sitter_language_pack

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
FUNCTION_KINDS = frozenset({"function", "method"})
MAX_HEADER_LINES = 8
MAX_LINE_CHARS = 200
WRAPPER_TYPES = frozenset({"export_statement", "decorated_definition"})
IDENTIFIER = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class FileTags:
    definitions: tuple[str, ...]  # sorted, unique
    references: str  # "name count name count ...", sorted by name: compact until the ranking reads it
    outline: str  # numbered signature lines; "" when nothing is defined

    def to_json(self) -> list[object]:
        return [list(self.definitions), self.references, self.outline]

    @classmethod
    def from_json(cls, value: list[object]) -> FileTags:
        definitions, references, outline = value
        return cls(tuple(definitions), str(references), str(outline))

    def reference_counts(self) -> list[tuple[str, int]]:
        words = self.references.split()
        return [(name, int(count)) for name, count in zip(words[::2], words[1::2], strict=True)]


def language_for(path: str) -> str | None:
    return LANGUAGE_BY_SUFFIX.get(PurePosixPath(path).suffix.lower())


@functools.cache
def _parser_and_query(language: str) -> tuple[tree_sitter.Parser, tree_sitter.Query]:
    source = (
        resources.files("agent.packing").joinpath("queries").joinpath(f"{language}.scm").read_text(encoding="utf-8")
    )
    grammar = tree_sitter_language_pack.get_language(language)  # type: ignore[arg-type]
    return tree_sitter_language_pack.get_parser(language), tree_sitter.Query(grammar, source)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class _Definition:
    node: tree_sitter.Node
    body: tree_sitter.Node | None
    kind: str


def extract_tags(language: str, text: str) -> FileTags:
    source = text.encode("utf-8", errors="surrogatepass")
    parser, query = _parser_and_query(language)
    root = parser.parse(source).root_node
    definitions: list[_Definition] = []
    names: set[str] = set()
    for _, captures in tree_sitter.QueryCursor(query).matches(root):
        kind_capture = next(name for name in captures if name.startswith("definition."))
        names.add((captures["name." + kind_capture][0].text or b"").decode("utf-8", errors="replace"))
        body = captures.get("body")
        definitions.append(_Definition(captures[kind_capture][0], body[0] if body else None, kind_capture[11:]))
    lines = source.split(b"\n")
    # References are the identifier-shaped words of the file, prose included: a regex over the bytes finds them
    # several times faster than walking the syntax tree in Python, and a name in a docstring is a real link too.
    references = Counter(IDENTIFIER.findall(source))
    encoded = " ".join(f"{name.decode('ascii')} {count}" for name, count in sorted(references.items()))
    return FileTags(tuple(sorted(names)), encoded, _outline(definitions, lines, language))


def _outline(definitions: list[_Definition], lines: list[bytes], language: str) -> str:
    """Signatures of top-level and class-level definitions (not those nested in functions), in file order."""
    ordered = sorted(definitions, key=lambda d: (d.node.start_byte, -d.node.end_byte))
    shown: dict[int, str] = {}
    enclosing_function_end = -1  # shown functions never overlap, so the latest one is the only possible parent
    for definition in ordered:
        if definition.node.start_byte < enclosing_function_end:
            continue
        if definition.kind in FUNCTION_KINDS:
            enclosing_function_end = definition.node.end_byte
        shown.update(_header_lines(definition, lines))
        doc_row = _doc_line_row(definition, language, lines)
        if doc_row is not None:
            shown[doc_row] = _line(lines, doc_row)
    return "".join(f"{row + 1}: {shown[row]}\n" for row in sorted(shown))


def _line(lines: list[bytes], row: int, end_column: int | None = None) -> str:
    raw = lines[row] if end_column is None else lines[row][:end_column]
    line = raw.decode("utf-8", errors="replace").rstrip()
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + "…"


def _header_lines(definition: _Definition, lines: list[bytes]) -> dict[int, str]:
    first_row = definition.node.start_point.row
    body = definition.body
    if body is None or body.start_point.row == first_row:
        end_column = body.start_point.column if body is not None else None
        text = _line(lines, first_row, end_column) or _line(lines, first_row)
        return {first_row: text}
    last_row = min(body.start_point.row, first_row + MAX_HEADER_LINES - 1)
    header = {row: _line(lines, row) for row in range(first_row, last_row)}
    if last_row == body.start_point.row and body.start_point.column > 0:
        opening = _line(lines, last_row, body.start_point.column)
        if opening.strip():
            header[last_row] = opening
    return {row: text for row, text in header.items() if text.strip()}


def _doc_line_row(definition: _Definition, language: str, lines: list[bytes]) -> int | None:
    """The row of the first meaningful line of a docstring (Python) or of the comment just above."""
    if language == "python":
        body = definition.body
        first = body.named_children[0] if body is not None and body.named_children else None
        # Older grammars wrap a docstring in an expression_statement, newer ones do not.
        if first is not None and first.type == "expression_statement" and first.named_children:
            first = first.named_children[0]
        if first is not None and first.type == "string":
            return _first_wordy_row(lines, first.start_point.row, first.end_point.row)
        return None
    anchor = definition.node
    if anchor.parent is not None and anchor.parent.type in WRAPPER_TYPES:
        anchor = anchor.parent
    comment = anchor.prev_named_sibling
    if comment is None or "comment" not in comment.type or comment.end_point.row < anchor.start_point.row - 1:
        return None
    return _first_wordy_row(lines, comment.start_point.row, comment.end_point.row)


def _first_wordy_row(lines: list[bytes], first_row: int, last_row: int) -> int | None:
    for row in range(first_row, min(last_row, first_row + 4) + 1):
        if any(character.isalnum() for character in lines[row].decode("utf-8", errors="replace")):
            return row
    return None
