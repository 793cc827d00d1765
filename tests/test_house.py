"""The house by concern, checked from the source (ast; nothing of the product is imported): no import cycle, no
function-level import without its reason, the types at the bottom importing nothing, few top-level modules, each
package saying its concern and listing its modules, tests mirroring the packages."""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agent", "tools", "sandbox", "prompts")
PROTOCOL = "agent.protocol"
# The one product module the protocol may read: the sandbox's own settings types (an image name, limits).
PROTOCOL_MAY_IMPORT = ("sandbox.models",)
TEST_HELPERS = ("support", "bench")


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    lazy: bool
    line: int


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(tree: ast.Module, module: str, is_package: bool):
    """(absolute module, imported names or None, where: top|type|lazy, line) of each import statement."""

    def absolute(node: ast.ImportFrom) -> str:
        if node.level == 0:
            return node.module or ""
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
        return ".".join([*base, *([node.module] if node.module else [])])

    def walk(nodes, where: str):
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield alias.name, None, where, node.lineno
            elif isinstance(node, ast.ImportFrom):
                yield absolute(node), [alias.name for alias in node.names], where, node.lineno
            elif isinstance(node, ast.If) and _is_type_checking(node.test):
                yield from walk(node.body, "type")
                yield from walk(node.orelse, where)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield from walk(node.body, "lazy")
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    children = getattr(node, field, None)
                    if isinstance(children, list):
                        yield from walk(children, where)

    yield from walk(tree.body, "top")


def _imports() -> tuple[dict[str, Path], list[Import]]:
    """Every product import between product modules, module level and in functions (type-only ones left out).
    `from pkg import Name` goes to the module defining Name when pkg re-exports it (plainly or PEP 562)."""
    modules = _modules()
    trees = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in modules.items()}
    exports: dict[str, dict[str, str]] = defaultdict(dict)
    for name, tree in trees.items():
        if modules[name].name == "__init__.py":
            for target, names, _where, _line in _statements(tree, name, True):
                for imported in names or []:
                    if target in modules and target != name:
                        exports[name][imported] = target
    found = []
    for name, tree in trees.items():
        is_package = modules[name].name == "__init__.py"
        for target, names, where, line in _statements(tree, name, is_package):
            if where == "type":
                continue
            for resolved in _resolve(target, names, modules, exports):
                if resolved != name:
                    found.append(Import(name, resolved, where == "lazy", line))
    return modules, found


def _resolve(target: str, names: list[str] | None, modules: dict[str, Path], exports: dict[str, dict[str, str]]):
    if names is None:
        return [target] if target in modules else []
    resolved = set()
    for imported in names:
        if f"{target}.{imported}" in modules:
            resolved.add(f"{target}.{imported}")
        elif imported in exports.get(target, {}):
            resolved.add(exports[target][imported])
        elif target in modules:
            resolved.add(target)
    return sorted(resolved)


def test_the_protocol_imports_nothing_of_the_product() -> None:
    modules, imports = _imports()
    assert any(name.startswith(PROTOCOL + ".") for name in modules), "agent/protocol/ holds the shared types"
    wrong = [
        f"{each.source} imports {each.target}"
        for each in imports
        if (each.source == PROTOCOL or each.source.startswith(PROTOCOL + "."))
        and not each.target.startswith(PROTOCOL)
        and each.target not in PROTOCOL_MAY_IMPORT
    ]
    wrong += [f"{each.source} imports {each.target}" for each in imports if each.source in PROTOCOL_MAY_IMPORT]
    assert not wrong


def _packages() -> list[Path]:
    return sorted(
        init.parent for package in PACKAGES for init in (ROOT / package).rglob("__init__.py") if init.parent != ROOT
    )


def test_the_tests_mirror_the_packages() -> None:
    """Test files have unique names (pytest imports them by basename) and sit in a folder named after the product
    package they test (or support/, bench/)."""
    files = sorted((ROOT / "tests").rglob("test_*.py"))
    names = [path.name for path in files]
    assert sorted(name for name in set(names) if names.count(name) > 1) == []
    packages = {path.name for path in _packages()} | {"tools", "sandbox"}
    folders = {path.parent.relative_to(ROOT / "tests").parts for path in files} - {()}
    assert [folder for folder in sorted(folders) if folder[0] not in packages | set(TEST_HELPERS)] == []


def test_the_loop_knows_nothing_of_git_tests_or_files() -> None:
    tree = ast.parse((ROOT / "agent" / "loop.py").read_text(encoding="utf-8"))
    imported = [name for name, _names, _where, _line in _statements(tree, "agent.loop", False)]
    forbidden = ("agent.worktree", "agent.gate", "agent.run", "git", "subprocess", "pathlib", "shutil")
    assert [name for name in imported if name.split(".")[0] in forbidden or name.startswith(forbidden)] == []
