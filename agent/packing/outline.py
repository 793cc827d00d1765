"""Outlines: signatures and docstrings' first lines of a file's definitions, drawn with tree-sitter grammars.

The grammars come from tree-sitter-language-pack 0.13.0, which ships them compiled (offline); the queries
(queries/*.scm) name the definitions. Only files chosen to be shown as outlines are parsed, in rank order, and
an outline depends only on the file's bytes and language, so it is cached per blob id. An outline is capped
in size, so one huge test module cannot take the room of dozens of other files' outlines.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import tree_sitter
import tree_sitter_language_pack

FUNCTION_KINDS = frozenset({"function", "method"})
MAX_HEADER_LINES = 8
MAX_LINE_CHARS = 200
MAX_OUTLINE_BYTES = 4096
# A huge file is outlined from its first part only: parsing costs time in proportion to the whole file, while
# the outline is capped anyway (a 370 KB test module's whole-file outline was one class line). The outline
# says where it stops, and the model can read the rest.
MAX_PARSED_BYTES = 64 * 1024
WRAPPER_TYPES = frozenset({"export_statement", "decorated_definition"})
# TSX is TypeScript plus JSX: the definitions it names are the same node types, so the query is shared.
QUERY_FILE = {"tsx": "typescript"}


@functools.cache
def _parser_and_query(language: str) -> tuple[tree_sitter.Parser, tree_sitter.Query]:
    source = (
        resources.files("agent.packing")
        .joinpath("queries")
        .joinpath(f"{QUERY_FILE.get(language, language)}.scm")
        .read_text(encoding="utf-8")
    )
    grammar = tree_sitter_language_pack.get_language(language)  # type: ignore[arg-type]
    return tree_sitter_language_pack.get_parser(language), tree_sitter.Query(grammar, source)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class _Definition:
    node: tree_sitter.Node
    body: tree_sitter.Node | None
    kind: str


@dataclass(slots=True)
class _Line:
    text: str
    nested: bool  # belongs only to definitions inside another shown one (methods, nested classes)
    doc: bool  # a docstring's or comment's line, not a signature


def extract_outline(language: str, text: str) -> str:
    """Numbered signature lines of top-level and class-level definitions; "" when nothing is defined."""
    source = text.encode("utf-8", errors="surrogatepass")
    note = ""
    if len(source) > MAX_PARSED_BYTES:
        total_lines = source.count(b"\n") + (not source.endswith(b"\n"))
        source = source[: source.rfind(b"\n", 0, MAX_PARSED_BYTES) + 1 or MAX_PARSED_BYTES]
        parsed_lines = source.count(b"\n")
        note = f"... outline of lines 1-{parsed_lines} of {total_lines} only\n"
    parser, query = _parser_and_query(language)
    root = parser.parse(source).root_node
    definitions: list[_Definition] = []
    for _, captures in tree_sitter.QueryCursor(query).matches(root):
        kind_capture = next(name for name in captures if name.startswith("definition."))
        body = captures.get("body")
        definitions.append(_Definition(captures[kind_capture][0], body[0] if body else None, kind_capture[11:]))
    lines = _outline_lines(definitions, source.split(b"\n"), language)
    return _capped(lines, MAX_OUTLINE_BYTES - len(note)) + note if lines else ""


def _outline_lines(definitions: list[_Definition], lines: list[bytes], language: str) -> dict[int, _Line]:
    """Lines per row of definitions not nested in functions, in file order."""
    ordered = sorted(definitions, key=lambda d: (d.node.start_byte, -d.node.end_byte))
    shown: dict[int, _Line] = {}
    enclosing_function_end = -1  # shown functions never overlap, so the latest one is the only possible parent
    top_level_end = -1

    def show(row: int, text: str, *, nested: bool, doc: bool) -> None:
        earlier = shown.get(row)
        if earlier is not None:  # one row, several definitions: it is as important as the most important
            nested, doc = nested and earlier.nested, doc and earlier.doc
        shown[row] = _Line(text, nested, doc)

    for definition in ordered:
        start = definition.node.start_byte
        if start < enclosing_function_end:
            continue
        nested = start < top_level_end
        if not nested:
            top_level_end = definition.node.end_byte
        if definition.kind in FUNCTION_KINDS:
            enclosing_function_end = definition.node.end_byte
        for row, text in _header_lines(definition, lines).items():
            show(row, text, nested=nested, doc=False)
        doc_row = _doc_line_row(definition, language, lines)
        if doc_row is not None:
            show(doc_row, _line(lines, doc_row), nested=nested, doc=True)
    return {row: shown[row] for row in sorted(shown)}


def _render(lines: dict[int, _Line], omitted: int) -> str:
    text = "".join(f"{row + 1}: {line.text}\n" for row, line in lines.items())
    return text + (f"... {omitted} more outline lines not shown\n" if omitted else "")


def _size(row: int, line: _Line) -> int:
    return len(f"{row + 1}: {line.text}\n".encode("utf-8", errors="surrogatepass"))


def _capped(lines: dict[int, _Line], limit: int) -> str:
    """The whole outline when it fits the cap; else without nested docstrings; else every top-level line and,
    in file order, the nested signatures that fit (a one-class test module still shows its first methods);
    else the first top-level lines that fit."""
    for keep in (lambda line: True, lambda line: not (line.nested and line.doc)):
        kept = {row: line for row, line in lines.items() if keep(line)}
        text = _render(kept, len(lines) - len(kept))
        if len(text.encode("utf-8", errors="surrogatepass")) <= limit:
            return text
    # Room left after the longest note the omitted lines can need.
    room = limit - len(_render({}, len(lines)).encode())
    top_level = {row: line for row, line in lines.items() if not line.nested}
    chosen: dict[int, _Line] = {}
    for row, line in top_level.items():
        room -= _size(row, line)
        if room < 0:
            return _render(chosen, len(lines) - len(chosen))
        chosen[row] = line
    for row, line in lines.items():
        if line.nested and not line.doc:
            room -= _size(row, line)
            if room < 0:
                break
            chosen[row] = line
    return _render(dict(sorted(chosen.items())), len(lines) - len(chosen))


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
