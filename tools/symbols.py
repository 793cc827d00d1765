"""Symbol tools: find, rename and move a symbol across the repository, done inside the task's sandbox.

Their work is tools/in_sandbox/symbols_helper.py, run by the sandbox's python3 like the file tools' helper. It needs
rope (Python renames and moves) and tree-sitter (other languages' identifiers), which the sandbox image does not
have. They are mounted read-only from the host's own environment at their own paths, rather than installed into
the image: the image stays the small offline Debian build it is, the versions are exactly the ones pinned in
pyproject.toml and tested here, and rope is pure Python. tree-sitter's compiled extension only loads when the
image's python3 has the host's minor version (both 3.11 today); where it cannot, find_symbol says so in its reply
and falls back to a text match for those languages, and rename_symbol never needed it.
"""

from __future__ import annotations

import functools
import re
import shlex
from importlib import metadata, resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from agent.packing.languages import LANGUAGE_BY_SUFFIX
from tools.base import ToolContext, ToolSpec
from tools.rpc import call_helper

# Distributions the helper imports, with what they import in turn (tree-sitter-language-pack's grammar packages
# are read from its own requirements).
SANDBOX_DISTRIBUTIONS = (
    "rope",
    "pytoolconfig",
    "platformdirs",
    "packaging",
    "tree-sitter",
    "tree-sitter-language-pack",
)
SymbolKind = Literal["function", "class", "variable", "parameter", "attribute"]


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s;<>=!~\[]", requirement, maxsplit=1)[0]


@functools.cache
def _distribution_paths() -> tuple[Path, ...]:
    """The top-level folders and files (packages and .dist-info) of each distribution, where they are installed."""
    names = [*SANDBOX_DISTRIBUTIONS, *map(_requirement_name, metadata.requires("tree-sitter-language-pack") or [])]
    paths: set[Path] = set()
    for name in names:
        distribution = metadata.distribution(name)
        for file in distribution.files or []:
            if file.parts[0] != "..":  # scripts in bin/ are not needed
                paths.add(Path(str(distribution.locate_file(file.parts[0]))).resolve())
    return tuple(sorted(paths))


def _helpers_folder() -> Path:
    """The scripts that run in the container (tools/in_sandbox/): all of the product the sandbox sees."""
    return Path(str(resources.files("tools.in_sandbox"))).resolve()


def sandbox_mounts() -> list[Path]:
    """Read-only mounts the symbol tools need in the task's container (each at its own path)."""
    return [_helpers_folder(), *_distribution_paths()]


@functools.cache
def _helper_command() -> str:
    """`python3 -I` (nothing of the workspace on sys.path) importing the helper and the libraries from the mounts."""
    folders = sorted({str(_helpers_folder())} | {str(path.parent) for path in _distribution_paths()})
    bootstrap = f"import sys; sys.path[:0] = {folders!r}; import symbols_helper; symbols_helper.main()"
    return f"python3 -I -c {shlex.quote(bootstrap)}"


def call_symbols_helper(context: ToolContext, request: dict[str, object]) -> str:
    # As long as a command may take: rope reads every module that mentions the name, which in a large
    # repository takes longer than a file tool's minute.
    return call_helper(
        context, _helper_command(), {**request, "languages": LANGUAGE_BY_SUFFIX}, timeout_s=context.command_timeout_s
    )


class FindSymbolArguments(BaseModel):
    name: str = Field(description="The identifier to look for (not a dotted path).")
    kind: SymbolKind | None = Field(None, description="Only definitions of this kind (references are all listed).")


class RenameSymbolArguments(BaseModel):
    path: str = Field(description="A Python file where the symbol is defined or used.")
    line: int = Field(ge=1, description="Line of an occurrence of the symbol (1-based, as find_symbol lists).")
    column: int = Field(ge=1, description="Column of that occurrence (1-based, as find_symbol lists).")
    new_name: str = Field(description="The new identifier.")


class MoveSymbolArguments(BaseModel):
    path: str = Field(description="The Python module that defines the function or class now.")
    name: str = Field(description="The top-level function or class to move.")
    to_path: str = Field(description="The Python module to move it to (created when missing).")


def _symbol_tool(name: str, description: str, arguments: type[BaseModel], *, changes_files: bool) -> ToolSpec:
    return ToolSpec(
        name,
        description,
        arguments,
        lambda given, context: call_symbols_helper(context, {"op": name, **given.model_dump()}),
        changes_files=changes_files,
    )


SYMBOL_TOOLS = [
    _symbol_tool(
        "find_symbol",
        "List a name's definitions and references across the repository (path:line:column and the line), "
        "definitions first; mentions in strings, comments and non-code files listed apart.",
        FindSymbolArguments,
        changes_files=False,
    ),
    _symbol_tool(
        "rename_symbol",
        "Rename the Python symbol at path:line:column everywhere it is used (scope- and import-aware, with rope), "
        "imports included. Lists the edited lines and the sites it left alone (strings, dynamic uses).",
        RenameSymbolArguments,
        changes_files=True,
    ),
    _symbol_tool(
        "move_symbol",
        "Move a top-level Python function or class to another module (with rope) and update its imports everywhere.",
        MoveSymbolArguments,
        changes_files=True,
    ),
]
