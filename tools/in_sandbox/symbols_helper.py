"""The symbol tools' work, done INSIDE the sandbox: one JSON request on stdin, one JSON reply line on stdout.

Like fileops_helper.py beside it (whose path confinement and no-follow reads and writes it reuses), this runs under
`python3 -I` in the task's container. Its libraries come from the host's environment, mounted read-only at their
own paths (tools/symbols.py says which and why): rope for Python renames and moves, tree-sitter for the other
languages' identifiers. When tree-sitter cannot load there, `find_symbol` says so and falls back to a text match.

Rope never writes: its change set is computed, checked whole, and only then written file by file through
fileops_helper's link-refusing writes, so bad input changes nothing.
"""

from __future__ import annotations

import ast
import difflib
import io
import json
import keyword
import os
import re
import subprocess
import tokenize
from collections.abc import Iterator
from typing import Any

import fileops_helper as files
from fileops_helper import Refused

MAX_LISTED = 60  # sites per section of a reply; the rest are counted
LEDGER_SITES_SHOWN = 3
# Third-party code a rename must not touch (and rope need not read).
IGNORED_BY_ROPE = [".git", "*.pyc", "__pycache__", ".venv", "venv", "node_modules", ".tox", ".eggs"]


def _identifier(name: str, what: str) -> str:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise Refused(f"{what} '{name}' is not a valid identifier")
    return name


def _text(parts: list[str]) -> str:
    parent, handle, info = files._open(parts)
    try:
        return files._read_text(handle, info, files._shown(parts)).decode("utf-8", errors="replace")
    finally:
        os.close(handle)
        os.close(parent)


def _repository_files(languages: dict[str, str]) -> list[tuple[str, str | None]]:
    """(path, language or None) of every file git lists (tracked, and untracked but not ignored)."""
    found = []
    for name in files._candidate_files([]):
        suffix = os.path.splitext(name)[1].lower()
        found.append((name, languages.get(suffix)))
    return found


class Site:
    def __init__(self, path: str, line: int, column: int, text: str, tag: str) -> None:
        self.path, self.line, self.column, self.text, self.tag = path, line, column, text, tag

    def render(self) -> str:
        return f"{self.path}:{self.line}:{self.column}: [{self.tag}] {self.text.strip()[: files.SHOWN_LINE_CHARS]}"


def _word(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w]){re.escape(name)}(?![\w])")


def _python_sites(path: str, source: str, name: str) -> tuple[list[Site], list[Site], list[Site]]:
    """(definitions, references, mentions in strings/comments) of `name` from Python's own tokenizer and ast."""
    tree = ast.parse(source)
    lines = source.splitlines()
    stores: dict[tuple[int, int], str] = {}
    import_lines: set[int] = set()
    in_fstrings = _fstring_uses(tree, name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            stores[(node.lineno, node.col_offset)] = "variable"
        elif isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.ctx, ast.Store):
            stores[(node.end_lineno or node.lineno, node.end_col_offset or 0)] = "attribute"
        elif isinstance(node, ast.arg) and node.arg == name:
            stores[(node.lineno, node.col_offset)] = "parameter"
        elif isinstance(node, ast.Import | ast.ImportFrom):
            import_lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    definitions: list[Site] = []
    references: dict[tuple[int, int], Site] = {}  # by (line, column): an f-string's names may come twice
    mentions: list[Site] = []
    word = _word(name)
    previous = ""
    for row, byte_column in in_fstrings:
        text = lines[row - 1]
        column = len(text.encode("utf-8")[:byte_column].decode("utf-8", "replace"))
        references[(row, column)] = Site(path, row, column + 1, text, "code")
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        (row, column), text = token.start, lines[token.start[0] - 1] if token.start[0] <= len(lines) else ""
        if token.type == tokenize.NAME and token.string == name:
            byte_column = len(text[:column].encode("utf-8"))
            byte_end = byte_column + len(name.encode("utf-8"))
            if previous in ("def", "class"):
                definitions.append(Site(path, row, column + 1, text, "function" if previous == "def" else "class"))
            elif (row, byte_column) in stores and stores[(row, byte_column)] != "attribute":
                definitions.append(Site(path, row, column + 1, text, stores[(row, byte_column)]))
            elif (row, byte_end) in stores:
                definitions.append(Site(path, row, column + 1, text, "attribute"))
            else:
                tag = "import" if row in import_lines else "code"
                references[(row, column)] = Site(path, row, column + 1, text, tag)
        elif token.type == tokenize.STRING and any(token.start <= use <= token.end for use in references):
            pass  # an f-string whose replacement fields use the name: listed with the code above
        elif token.type in (tokenize.STRING, tokenize.COMMENT) and word.search(token.string):
            kind = "comment" if token.type == tokenize.COMMENT else "string"
            mentions.append(Site(path, row, column + 1, text, kind))
        if token.type == tokenize.NAME:
            previous = token.string
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
            previous = ""
    return definitions, sorted(references.values(), key=lambda site: (site.line, site.column)), mentions


def _fstring_uses(tree: ast.AST, name: str) -> list[tuple[int, int]]:
    """(line, byte column) of the name used as code inside f-strings, which Python 3.11's tokenizer reads as one
    string token."""
    uses = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.JoinedStr):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and inner.id == name:
                uses.append((inner.lineno, inner.col_offset))
            elif isinstance(inner, ast.Attribute) and inner.attr == name and inner.end_col_offset is not None:
                uses.append((inner.end_lineno or inner.lineno, inner.end_col_offset - len(name.encode("utf-8"))))
    return uses


def _tree_sitter_parser(language: str) -> Any:
    import tree_sitter_language_pack  # mounted from the host; absent or incompatible: the caller falls back

    return tree_sitter_language_pack.get_parser(language)  # type: ignore[arg-type]


def _tree_sitter_nodes(data: bytes, name: str, language: str) -> Iterator[tuple[str, Any]]:
    """("definition" | "reference" | "comment" | "string", node) for `name` in the language's grammar, in source
    order: an identifier is a definition when it is its parent's `name` field."""
    word = _word(name)
    pending = [_tree_sitter_parser(language).parse(data).root_node]
    while pending:
        node = pending.pop()
        kind = node.type
        if "comment" in kind or "string" in kind:
            if word.search(data[node.start_byte : node.end_byte].decode("utf-8", "replace")):
                yield ("comment" if "comment" in kind else "string"), node
            continue
        if node.child_count == 0 and "identifier" in kind and data[node.start_byte : node.end_byte] == name.encode():
            parent = node.parent
            yield (
                ("definition" if parent is not None and parent.child_by_field_name("name") == node else "reference"),
                node,
            )
        pending.extend(reversed(node.children))


def _tree_sitter_sites(path: str, source: str, name: str, language: str) -> tuple[list[Site], list[Site], list[Site]]:
    lines = source.splitlines()
    definitions, references, mentions = [], [], []
    for role, node in _tree_sitter_nodes(source.encode("utf-8"), name, language):
        row, byte_column = node.start_point
        text = lines[row] if row < len(lines) else ""
        column = len(text.encode("utf-8")[:byte_column].decode("utf-8", "replace")) + 1
        if role == "definition":
            definitions.append(Site(path, row + 1, column, text, node.parent.type))
        elif role == "reference":
            references.append(Site(path, row + 1, column, text, "code"))
        else:
            mentions.append(Site(path, row + 1, column, text, role))
    return definitions, references, mentions


def _text_sites(path: str, source: str, name: str) -> list[Site]:
    word = _word(name)
    return [
        Site(path, number, match.start() + 1, line, "text")
        for number, line in enumerate(source.splitlines(), start=1)
        for match in [word.search(line)]
        if match
    ]


def _scan(name: str, languages: dict[str, str]) -> tuple[list[Site], list[Site], list[Site], dict[str, str]]:
    """Every site of `name` in the repository, and the method each language was read with."""
    definitions: list[Site] = []
    references: list[Site] = []
    mentions: list[Site] = []
    methods: dict[str, str] = {}
    needle = name.encode("utf-8")
    oversized: list[str] = []
    for path, language in _repository_files(languages):
        data = files._searchable(path, oversized)
        if data is None or needle not in data:
            continue
        source = data.decode("utf-8", errors="replace")
        if language is None:
            mentions += [_tag(site, "other file") for site in _text_sites(path, source, name)]
            continue
        try:
            if language == "python":
                found = _python_sites(path, source, name)
                methods[language] = "python's ast and tokenizer"
            else:
                found = _tree_sitter_sites(path, source, name, language)
                methods[language] = "tree-sitter"
        except (SyntaxError, tokenize.TokenError, ValueError):
            methods[f"{language} (unparsable files)"] = "text match"
            references += [_tag(site, "unparsed") for site in _text_sites(path, source, name)]
            continue
        except ImportError as error:
            methods[language] = f"text match (tree-sitter cannot load in the sandbox: {error})"
            references += [_tag(site, "text") for site in _text_sites(path, source, name)]
            continue
        definitions += found[0]
        references += found[1]
        mentions += found[2]
    return definitions, references, mentions, methods


def _tag(site: Site, tag: str) -> Site:
    site.tag = tag
    return site


def _listed(title: str, sites: list[Site]) -> list[str]:
    if not sites:
        return []
    shown = [f"{title} ({len(sites)}):", *(site.render() for site in sites[:MAX_LISTED])]
    if len(sites) > MAX_LISTED:
        shown.append(f"[{len(sites) - MAX_LISTED} more not shown]")
    return shown


def find_symbol(request: dict[str, Any]) -> str:
    name = _identifier(request["name"], "name")
    definitions, references, mentions, methods = _scan(name, request["languages"])
    kind = request.get("kind")
    if kind:
        definitions = [site for site in definitions if site.tag == kind]
    if not definitions and not references and not mentions:
        return f"no definition or reference of '{name}' in the repository's files"
    method = "; ".join(f"{language}: {how}" for language, how in sorted(methods.items())) or "text match"
    header = (
        f"'{name}': {len(definitions)} definitions, {len(references)} references "
        f"(read with {method}); mentions in strings, comments and other files listed apart"
    )
    body = [
        *_listed("definitions", definitions),
        *_listed("references", references),
        *_listed("in strings, comments and other files (not code)", mentions),
    ]
    return "\n".join([header, *body])


def _rope_project() -> Any:
    from rope.base.project import Project

    links = []
    for folder, subfolders, names in os.walk(".", followlinks=False):
        subfolders[:] = [entry for entry in subfolders if entry != ".git"]
        for entry in [*subfolders, *names]:
            if os.path.islink(os.path.join(folder, entry)):
                links.append(os.path.relpath(os.path.join(folder, entry), "."))
    # ropefolder=None: nothing of rope's is written into the workspace; links are never read through.
    project = Project(".", ropefolder=None, ignored_resources=IGNORED_BY_ROPE + links)
    # `from package.module import name`, the form refactored code mostly uses, rather than rope's `import module`.
    project.prefs.imports.preferred_import_style = "from-global"
    return project


def _offset(source: str, line: int, column: int, shown: str) -> int:
    lines = source.splitlines(keepends=True)
    if not 1 <= line <= len(lines):
        raise Refused(f"'{shown}' has {len(lines)} lines; line {line} does not exist")
    if not 1 <= column <= len(lines[line - 1].rstrip("\r\n")):
        raise Refused(f"line {line} of '{shown}' has no column {column}")
    return sum(len(text) for text in lines[: line - 1]) + column - 1


def _parses(path: str, source: str) -> None:
    try:
        ast.parse(source)
    except SyntaxError as error:
        raise Refused(f"'{path}' does not parse (line {error.lineno}: {error.msg}); fix it first") from None


def _apply(changes: Any) -> list[str]:
    """Write rope's content changes through the no-follow writer; anything else rope proposes is refused first."""
    from rope.base.change import ChangeContents

    contents = list(changes.changes)
    odd = [change for change in contents if not isinstance(change, ChangeContents)]
    if odd:
        raise Refused(f"the refactoring needs changes other than edits ({odd[0]}); nothing was changed")
    return _write_all({change.resource.path: change.new_contents.encode("utf-8") for change in contents})


def _write_all(edits: dict[str, bytes]) -> list[str]:
    """Every file is opened (never through a link) and read before the first is written, so a file that cannot
    be edited stops the whole change before anything is written; the edited lines, as `path:line: text`."""
    originals = {}
    for path in edits:
        parts = files._parts(path)
        parent, handle, info = files._open(parts)
        try:
            originals[path] = (files._read_text(handle, info, path), info.st_mode)
        finally:
            os.close(handle)
            os.close(parent)
    sites = []
    for path, data in edits.items():
        parts = files._parts(path)
        old, mode = originals[path]
        parent = files._open_parent(parts)
        try:
            files._replace(parent, parts[-1], data, mode)
        finally:
            os.close(parent)
        sites += _changed_lines(path, old.decode("utf-8", "replace"), data.decode("utf-8", "replace"))
    return sites


def _changed_lines(path: str, old: str, new: str) -> list[str]:
    new_lines = new.splitlines()
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new_lines, autojunk=False)
    return [
        f"{path}:{number + 1}: {new_lines[number].strip()[: files.SHOWN_LINE_CHARS]}"
        for tag, _, _, start, end in matcher.get_opcodes()
        if tag != "equal"
        for number in range(start, end)
    ]


def _summary(title: str, sites: list[str]) -> list[str]:
    shown = [f"{title} ({len(sites)}):", *sites[:MAX_LISTED]]
    return shown + ([f"[{len(sites) - MAX_LISTED} more]"] if len(sites) > MAX_LISTED else [])


def _rope_errors() -> tuple[type[Exception], ...]:
    from rope.base import exceptions

    return (exceptions.RefactoringError, exceptions.ModuleSyntaxError, exceptions.BadIdentifierError)


def _word_at(source: str, offset: int, where: str) -> tuple[int, str]:
    """(start offset, identifier) of the identifier around `offset`, or Refused."""
    start = offset - len(re.search(r"\w*$", source[:offset]).group())  # type: ignore[union-attr]
    name = source[start:offset] + re.match(r"\w*", source[offset:]).group()  # type: ignore[union-attr]
    if not name.isidentifier() or keyword.iskeyword(name):
        raise Refused(f"no identifier at {where}")
    return start, name


def rename_symbol(request: dict[str, Any]) -> str:
    new_name = _identifier(request["new_name"], "new_name")
    parts = files._parts(request["path"])
    shown = files._shown(parts)
    language = request["languages"].get(os.path.splitext(shown)[1].lower())
    if language is None:
        raise Refused(f"'{shown}' is not source code of a language the symbol tools read; use str_replace")
    source = _text(parts)
    where = f"{shown}:{request['line']}:{request['column']}"
    if language == "python":
        _parses(shown, source)
    start, old_name = _word_at(source, _offset(source, request["line"], request["column"], shown), where)
    if old_name == new_name:
        raise Refused(f"the symbol is already named '{new_name}'")
    if language == "python":
        return _rope_rename(shown, start, old_name, new_name, request["languages"])
    return _tree_sitter_rename(shown, source, start, (old_name, new_name), language, request["languages"])


IMPORT_LINE = re.compile(r"\b(import|require|use|using|include)\b")


def _tree_sitter_rename(
    shown: str, source: str, start: int, names: tuple[str, str], language: str, languages: dict[str, str]
) -> str:
    """Every identifier `old_name` (not strings, not comments) in the files of the language that declare it or
    import it: the grammar knows identifiers, not scopes, and the reply says so."""
    old_name, new_name = names
    start_byte = len(source[:start].encode("utf-8"))
    try:
        here = list(_tree_sitter_nodes(source.encode("utf-8"), old_name, language))
    except ImportError as error:
        raise Refused(f"tree-sitter cannot load in the sandbox ({error}); use find_symbol and str_replace") from None
    if not any(node.start_byte == start_byte and role in ("definition", "reference") for role, node in here):
        line = source[:start].count("\n") + 1
        raise Refused(f"'{old_name}' at {shown} line {line} is not an identifier in code (a string or comment?)")
    edits: dict[str, bytes] = {}
    left: list[str] = []
    for path, file_language in _repository_files(languages):
        data = files._searchable(path, [])
        if file_language != language or data is None or old_name.encode() not in data:
            continue
        text = data.decode("utf-8", errors="replace")
        nodes = list(_tree_sitter_nodes(data, old_name, language))
        declares = any(role == "definition" for role, _ in nodes)
        imports = any(IMPORT_LINE.search(line) and _word(old_name).search(line) for line in text.splitlines())
        if new_name.encode() in data and any(
            role == "definition" for role, _ in _tree_sitter_nodes(data, new_name, language)
        ):
            raise Refused(f"'{new_name}' already exists in '{path}'; choose another name")
        if not (declares or imports or path == shown):
            left += [f"{path}: mentions '{old_name}' but neither declares nor imports it (left as it is)"]
            continue
        renamed = bytearray(data)
        for role, node in sorted(nodes, key=lambda item: item[1].start_byte, reverse=True):
            if role in ("definition", "reference"):
                renamed[node.start_byte : node.end_byte] = new_name.encode()
            else:
                left.append(f"{path}:{node.start_point[0] + 1}: [{role}] not renamed")
        edits[path] = bytes(renamed)
    sites = _write_all(edits)
    reply = [
        f"renamed '{old_name}' to '{new_name}' with a tree-sitter identifier rename ({language}; NOT scope-aware: "
        "every identifier of that name in the files that declare or import it):"
    ]
    return "\n".join(reply + _summary("edited lines", sites) + _summary("NOT renamed, check by hand", left))


def _rope_rename(shown: str, start: int, old_name: str, new_name: str, languages: dict[str, str]) -> str:
    from rope.base import evaluate, libutils
    from rope.refactor.rename import Rename

    project = _rope_project()
    try:
        resource = libutils.path_to_resource(project, shown)
        pymodule = project.get_pymodule(resource)
        pyname = evaluate.eval_location(pymodule, start)
        if pyname is None:
            raise Refused(f"'{old_name}' in {shown} is not a symbol rope can resolve")
        taken = _taken(pyname, new_name)
        if taken:
            raise Refused(f"'{new_name}' already exists {taken}; choose another name")
        unsure: list[str] = []

        def note_unsure(occurrence: Any) -> bool:
            line = occurrence.resource.read()[: occurrence.offset].count("\n") + 1
            unsure.append(f"{occurrence.resource.path}:{line}: not sure it is the same symbol (left as it is)")
            return False

        changes = Rename(project, resource, start).get_changes(new_name, docs=False, unsure=note_unsure)
        sites = _apply(changes)
    except _rope_errors() as error:
        raise Refused(f"rope cannot rename '{old_name}': {error}") from None
    finally:
        project.close()
    left = _not_renamed(old_name, languages)
    reply = [f"renamed '{old_name}' to '{new_name}' with rope (scope- and import-aware):"]
    reply += _summary("edited lines", sites)
    reply += _summary("NOT renamed, check by hand (dynamic uses, strings, comments, other files)", unsure + left)
    return "\n".join(reply)


def _taken(pyname: Any, new_name: str) -> str:
    """Where `new_name` is already bound in the scope the symbol is defined in, or ''."""
    module, line = pyname.get_definition_location()
    if module is None or line is None:
        return ""
    scope = module.get_scope().get_inner_scope_for_line(line)
    try:
        defined_here = scope.pyobject == pyname.get_object() and scope.parent is not None
    except Exception:  # names rope cannot evaluate have no object of their own
        defined_here = False
    if defined_here:
        scope = scope.parent
    if new_name in scope.get_names():
        return f"in {module.get_resource().path if module.get_resource() else 'the module'} (line {line}'s scope)"
    return ""


def _not_renamed(old_name: str, languages: dict[str, str]) -> list[str]:
    """Sites of the old name still there after the rename: strings (getattr's, __all__'s), comments, others."""
    definitions, references, mentions, _ = _scan(old_name, languages)
    return [site.render() for site in definitions + references + mentions]


def move_symbol(request: dict[str, Any]) -> str:
    from rope.base import libutils
    from rope.refactor.move import MoveGlobal

    name = _identifier(request["name"], "name")
    parts, target = files._parts(request["path"]), files._parts(request["to_path"])
    shown, target_shown = files._shown(parts), files._shown(target)
    for path in (shown, target_shown):
        if not path.endswith(".py"):
            raise Refused(f"move_symbol moves Python symbols between modules; '{path}' is not a .py file")
    if shown == target_shown:
        raise Refused("path and to_path are the same module")
    source = _text(parts)
    _parses(shown, source)
    tree = ast.parse(source)
    defined = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name
    ]
    if not defined:
        raise Refused(f"'{shown}' has no top-level function or class '{name}'")
    existing = _existing_text(target)
    if existing is not None:
        _parses(target_shown, existing)
        if name in _top_level_names(existing):
            raise Refused(f"'{target_shown}' already defines '{name}'; nothing was changed")
    else:
        files.create_file({"path": target_shown, "content": ""})
    line = defined[0].lineno
    offset = _offset(source, line, 1, shown) + source.splitlines()[line - 1].index(name, defined[0].col_offset)
    project = _rope_project()
    try:
        changes = MoveGlobal(project, project.get_resource(shown), offset).get_changes(
            project.get_resource(target_shown)
        )
        sites = _apply(changes)
        modules = (libutils.modname(project.get_resource(shown)), libutils.modname(project.get_resource(target_shown)))
    except (*_rope_errors(), Refused) as error:
        if existing is None:  # the module made for the move goes again: nothing changed
            os.unlink(target_shown)
        raise Refused(f"cannot move '{name}': {error}") from None
    finally:
        project.close()
    sites += _redirect_imports(name, *modules, request["languages"])
    reply = [f"moved '{name}' from '{shown}' to '{target_shown}' with rope, imports updated:"]
    return "\n".join(reply + _summary("edited lines", sites))


def _imported_module(path: str, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` names, relative forms resolved against the file's package."""
    if not node.level:
        return node.module or ""
    package = path.split("/")[:-1]  # a module's package, and an __init__.py's own
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _same_module(imported: str, module: str) -> bool:
    """Rope names modules from the project root ("src.pkg.core"), code from its source folder ("pkg.core")."""
    return imported == module or module.endswith("." + imported)


def _redirect_imports(name: str, source_module: str, target_module: str, languages: dict[str, str]) -> list[str]:
    """`from <old module> import name` statements rope leaves alone (re-exports nothing else uses, say) now
    import it from its new module; a statement that also imports other names gets a line of its own."""
    edits: dict[str, bytes] = {}
    for path, language in _repository_files(languages):
        data = files._searchable(path, []) if language == "python" else None
        if data is None or name.encode() not in data:
            continue
        try:
            source = data.decode("utf-8")  # strictly: a file rewritten from a lossy decoding would lose bytes
            tree = ast.parse(source)
        except (UnicodeDecodeError, SyntaxError):
            continue
        lines = source.splitlines(keepends=True)
        statements = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and any(alias.name == name for alias in node.names)
            and _same_module(_imported_module(path, node), source_module)
        ]
        for node in sorted(statements, key=lambda node: node.lineno, reverse=True):
            alias = next(alias for alias in node.names if alias.name == name)
            indent = re.match(r"\s*", lines[node.lineno - 1]).group()  # type: ignore[union-attr]
            line = f"{indent}from {target_module} import {name}" + (f" as {alias.asname}" if alias.asname else "")
            others = [item for item in node.names if item is not alias]
            kept = ""
            if others:
                names = ", ".join(item.name + (f" as {item.asname}" if item.asname else "") for item in others)
                kept = f"{indent}from {'.' * node.level}{node.module or ''} import {names}\n"
            lines[node.lineno - 1 : node.end_lineno] = [kept + line + "\n"]
        if statements:
            edits[path] = "".join(lines).encode("utf-8")
    return _write_all(edits)


def _existing_text(parts: list[str]) -> str | None:
    try:
        return _text(parts)
    except Refused as error:
        if "does not exist" in str(error):
            return None
        raise


def _top_level_names(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


def _changed_files() -> list[str]:
    listing = subprocess.run(
        ["git", "status", "--porcelain", "-z", "--untracked-files=all"],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    entries = listing.stdout.decode("utf-8", "replace").split("\0")
    return sorted({entry[3:] for entry in entries if len(entry) > 3})


def ledger(request: dict[str, Any]) -> str:
    """Files changed so far and, per old name, the code references left (first few), as one JSON object."""
    left: dict[str, Any] = {}
    for name in request["old_names"]:
        definitions, references, _, _ = _scan(_identifier(name, "old name"), request["languages"])
        sites = definitions + references
        left[name] = {"count": len(sites), "first": [f"{s.path}:{s.line}" for s in sites[:LEDGER_SITES_SHOWN]]}
    return json.dumps({"changed": _changed_files(), "left": left})


OPERATIONS = {"find_symbol": find_symbol, "rename_symbol": rename_symbol, "move_symbol": move_symbol, "ledger": ledger}


def main() -> None:
    files.serve(OPERATIONS, "symbol tool")


if __name__ == "__main__":
    main()
