"""What a `setup.py` says without running it: parsed with `ast` on the host (never executed: it is the repository's
code), for the few things the plan needs before the build, where its metadata is built for real.

Read: the `extras_require` keys (uv refuses an extra that does not exist), `python_requires`, and the committed
files it reads (a VERSION file, the package's `__init__.py`), which then belong to the image's digest.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

# A setup.py is a few KB; a larger one is not parsed (ast's work grows with it).
MAX_SETUP_PY_BYTES = 512 * 1024
MAX_LITERAL_CHARS = 200
# Read for the long description or the licence: they decide nothing installed, and editing them reuses the image.
_PROSE = re.compile(r"^(readme|change|history|news|authors|contributors|licen[cs]e|copying)|\.(md|rst)$", re.I)


@dataclass
class SetupPy:
    extras: list[str] | None = None  # None: not knowable without running it
    python_requires: str | None = None
    literals: set[str] = field(default_factory=set)  # short string constants: the paths it may open
    imports: set[str] = field(default_factory=set)  # modules it imports


def read_setup_py(text: str) -> SetupPy:
    read = SetupPy()
    if len(text) > MAX_SETUP_PY_BYTES:
        return read
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return read
    assignments: dict[str, ast.expr] = {}
    for node in ast.walk(module):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assignments[node.targets[0].id] = node.value
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) <= MAX_LITERAL_CHARS:
            read.literals.add(node.value)
        elif isinstance(node, ast.Import):
            read.imports.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            read.imports.add(node.module)
    for call in ast.walk(module):
        if isinstance(call, ast.Call) and called_name(call) == "setup":
            keywords = {keyword.arg: keyword.value for keyword in call.keywords if keyword.arg}
            if "python_requires" in keywords:
                read.python_requires = _string(keywords["python_requires"], assignments)
            if "extras_require" in keywords:
                read.extras = _keys(keywords["extras_require"], assignments)
            elif all(keyword.arg for keyword in call.keywords):  # no **kwargs that could hold them
                read.extras = []
    return read


def called_name(call: ast.Call) -> str:
    """`f` of `f(...)` and of `x.f(...)`."""
    if isinstance(call.func, ast.Name):
        return call.func.id
    return call.func.attr if isinstance(call.func, ast.Attribute) else ""


def _resolved(value: ast.expr, assignments: dict[str, ast.expr]) -> ast.expr:
    return assignments.get(value.id, value) if isinstance(value, ast.Name) else value


def _string(value: ast.expr, assignments: dict[str, ast.expr]) -> str | None:
    value = _resolved(value, assignments)
    return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None


def _keys(value: ast.expr, assignments: dict[str, ast.expr]) -> list[str] | None:
    """The keys of a dict literal (directly or through one module-level name), or None when it is computed."""
    value = _resolved(value, assignments)
    if isinstance(value, ast.Call) and called_name(value) == "dict" and not value.args:
        names = [keyword.arg for keyword in value.keywords]
        return [name for name in names if name] if all(names) else None
    if not isinstance(value, ast.Dict):
        return None
    keys = [key.value for key in value.keys if isinstance(key, ast.Constant) and isinstance(key.value, str)]
    return keys if len(keys) == len(value.keys) else None


def _names(path: str, literals: set[str], tails: set[str]) -> bool:
    parts = path.split("/")
    if path in literals or any(path == tail or path.endswith("/" + tail) for tail in tails):
        return True
    return len(parts) > 1 and all(part in literals for part in parts)


def files_read(setup: SetupPy, paths: list[str]) -> list[str]:
    """Committed files a setup.py names: by its whole path, by the tail of it, or piece by piece
    (`os.path.join(here, "src", "pkg", "VERSION")`); and the modules of the repository it imports."""
    tails = {literal.strip("./") for literal in setup.literals if "/" in literal}
    named = [path for path in paths if _names(path, setup.literals, tails)]
    present = set(paths)
    for module in setup.imports:
        parts = module.split(".")
        for end in range(1, len(parts) + 1):
            stem = "/".join(parts[:end])
            for root in ("", "src/"):
                named += [path for path in (f"{root}{stem}.py", f"{root}{stem}/__init__.py") if path in present]
    return sorted(path for path in set(named) - {"setup.py"} if not _PROSE.search(path.rsplit("/", 1)[-1]))
