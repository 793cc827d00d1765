"""The repository's test tooling files as data, for the two readers of them: which command runs the tests
(test_command_sources.py) and what the tests need installed (agent/environment/test_tooling.py).

tox's configuration (tox.ini, setup.cfg's [tox:tox], pyproject.toml's [tool.tox] in either form, tox.toml), a
noxfile's sessions and CI workflows come from the repository: hostile input, read on the host before the model
runs. Each caller hands in how it reads a file (`Read`: a worktree's regular file, never a link, or a committed
blob; at most a bound, None for anything else); here the text is parsed and never run: ini with configparser
(no interpolation), TOML with tomllib, the noxfile with `ast`, YAML with the safe loader, each under a size cap.
"""

from __future__ import annotations

import ast
import configparser
import re
import tomllib
from collections.abc import Callable
from typing import Any

import yaml

# A repository path's text as the caller may read it, or None (missing, not a regular file, too large).
Read = Callable[[str], str | None]

# A noxfile, a workflow: a few KB each; one larger than these is not one worth reading.
MAX_NOXFILE_BYTES = 512 * 1024
MAX_WORKFLOW_BYTES = 256 * 1024
MAX_WORKFLOWS = 32
WORKFLOWS = re.compile(r"^(\.github/workflows/[^/]+\.ya?ml|\.gitlab-ci\.yml)$")
LEGACY_TOX_INI = "pyproject.toml [tool.tox] legacy_tox_ini"


class ToolingFileError(Exception):
    """A tox.toml or pyproject.toml that is not TOML; str() names the file."""


def _ini(text: str) -> configparser.ConfigParser | None:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    return parser


def toml(read: Read, path: str) -> dict[str, Any]:
    """A TOML file of the repository ({} when there is none); ToolingFileError when it is not TOML."""
    text = read(path)
    if text is None:
        return {}
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ToolingFileError(f"{path} is not valid TOML: {error}") from None


def _tool_tox(document: dict[str, Any]) -> dict[str, Any]:
    tool = document.get("tool")
    tox = tool.get("tox") if isinstance(tool, dict) else None
    return tox if isinstance(tox, dict) else {}


def tox_inis(read: Read) -> list[tuple[str, configparser.ConfigParser]]:
    """tox's ini-form configurations as tox looks for them, each that parses: tox.ini, setup.cfg (when it has
    [tox:tox]), pyproject.toml's [tool.tox] legacy_tox_ini; as (where, parser)."""
    found = []
    for file in ("tox.ini", "setup.cfg"):
        text = read(file)
        parser = _ini(text) if text is not None else None
        if parser is not None and (file == "tox.ini" or parser.has_section("tox:tox")):
            found.append((file, parser))
    try:
        legacy = _tool_tox(toml(read, "pyproject.toml")).get("legacy_tox_ini")
    except ToolingFileError:  # a pyproject.toml that is not TOML holds no tox configuration
        legacy = None
    parser = _ini(legacy) if isinstance(legacy, str) else None
    if parser is not None:
        found.append((LEGACY_TOX_INI, parser))
    return found


def tox_tables(read: Read, *, skip_invalid: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """tox 4's native TOML configurations: tox.toml, then pyproject.toml's [tool.tox]; as (where, table).
    ToolingFileError when either file is not TOML, unless `skip_invalid` (then it is passed over)."""
    tables = []
    for where, file in (("tox.toml", "tox.toml"), ("pyproject.toml [tool.tox]", "pyproject.toml")):
        try:
            document = toml(read, file)
        except ToolingFileError:
            if not skip_invalid:
                raise
            continue
        table = document if file == "tox.toml" else _tool_tox(document)
        if table:
            tables.append((where, table))
    return tables


def session_name(function: ast.FunctionDef) -> str | None:
    """The nox session a function defines (`@nox.session`, `@session(name=...)`), None when it defines none."""
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else ""
        if name != "session":
            continue
        for keyword in decorator.keywords if isinstance(decorator, ast.Call) else []:
            value = keyword.value.value if isinstance(keyword.value, ast.Constant) else None
            if keyword.arg == "name" and isinstance(value, str):
                return value
        return function.name
    return None


def nox_sessions(read: Read) -> tuple[dict[str, ast.FunctionDef], dict[str, list[str]]]:
    """noxfile.py's sessions by name (in the file's order), and its module-level lists of strings (often spread
    into `session.install(*DEPS)`): parsed, never run. None of either for a noxfile too large or not Python."""
    text = read("noxfile.py")
    if text is None or len(text) > MAX_NOXFILE_BYTES:
        return {}, {}
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}, {}
    lists = {
        node.targets[0].id: [item.value for item in node.value.elts if isinstance(item, ast.Constant)]
        for node in module.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.List)
    }
    sessions = {
        name: node
        for node in module.body
        if isinstance(node, ast.FunctionDef) and (name := session_name(node)) is not None
    }
    return sessions, lists


def workflow(text: str | None) -> Any:
    """A CI workflow's document (GitHub Actions or GitLab CI), or None for one too large or not YAML."""
    if text is None or len(text) > MAX_WORKFLOW_BYTES:
        return None
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError, ValueError):
        return None
