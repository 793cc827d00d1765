"""The house by concern, checked from the source (ast; nothing of the product is imported): no import cycle, no
function-level import without its reason, the types at the bottom importing nothing, few top-level modules, each
package saying its concern and listing its modules, tests mirroring the packages."""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agent", "tools", "sandbox", "prompts")
PROTOCOL = "agent.protocol"
# The one product module the protocol may read: the sandbox's own settings types (an image name, limits).
PROTOCOL_MAY_IMPORT = ("sandbox.models",)
MAX_TOP_LEVEL_MODULES = 6
LAZY_MARK = "# lazy:"
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


@functools.cache  # one parse of each file for every test that reads it (the whole tree took a second); none changes it
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


@functools.cache  # one walk of the trees for the tests that read their imports
def _imports() -> tuple[dict[str, Path], list[Import]]:
    """Every product import between product modules, module level and in functions (type-only ones left out).
    `from pkg import Name` goes to the module defining Name when pkg re-exports it (plainly or PEP 562)."""
    modules = _modules()
    trees = {name: _tree(path) for name, path in modules.items()}
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


def _shortest_cycle(start: str, edges: dict[str, set[str]]) -> list[str] | None:
    previous: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for following in sorted(edges.get(node, ())):
            if following == start:
                path = [node]
                while previous[path[-1]] is not None:
                    path.append(previous[path[-1]])  # type: ignore[arg-type]
                return [*path[::-1], start]
            if following not in previous:
                previous[following] = node
                queue.append(following)
    return None


def test_no_import_cycle_among_the_products_modules() -> None:
    modules, imports = _imports()
    edges: dict[str, set[str]] = defaultdict(set)
    for each in imports:
        edges[each.source].add(each.target)
    cycles = [cycle for module in sorted(modules) if (cycle := _shortest_cycle(module, edges)) is not None]
    assert not cycles, f"{len(cycles)} modules on an import cycle, e.g. " + " -> ".join(min(cycles, key=len))


@functools.cache
def _runs_of_imports(path: Path) -> dict[int, int]:
    return _first_of_its_run(_tree(path))


def _first_of_its_run(tree: ast.Module) -> dict[int, int]:
    """For each import statement's line: the line of the first import of the run of imports it is in."""
    first: dict[int, int] = {}
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            statements = getattr(node, field, None)
            if not isinstance(statements, list):
                continue
            start = None
            for statement in statements:
                if isinstance(statement, ast.Import | ast.ImportFrom):
                    start = start or statement.lineno
                    first[statement.lineno] = start
                else:
                    start = None
    return first


def test_every_function_level_import_says_why_it_is_lazy() -> None:
    """A `# lazy: why` comment right above each run of imports in a function (a product import there is either
    start-up laziness, which says whose start-up it spares, or a dodged cycle, which the cycle test fails)."""
    modules, imports = _imports()
    unexplained = []
    for each in imports:
        if not each.lazy:
            continue
        source = modules[each.source].read_text(encoding="utf-8")
        lines = source.splitlines()
        above = _runs_of_imports(modules[each.source])[each.line] - 2
        comment = []  # the comment block right above the run of imports
        while above >= 0 and lines[above].strip().startswith("#"):
            comment.insert(0, lines[above].strip())
            above -= 1
        if not (comment and comment[0].startswith(LAZY_MARK)):
            unexplained.append(f"{modules[each.source].relative_to(ROOT)}:{each.line} imports {each.target}")
    assert not unexplained, f"function-level imports without a `{LAZY_MARK} why` comment: {sorted(set(unexplained))}"


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


def test_agent_has_at_most_six_top_level_modules() -> None:
    top = sorted(path.name for path in (ROOT / "agent").glob("*.py") if path.stem not in ("__init__", "__main__"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def _packages() -> list[Path]:
    return sorted(
        init.parent for package in PACKAGES for init in (ROOT / package).rglob("__init__.py") if init.parent != ROOT
    )


def test_each_package_says_its_concern_and_lists_its_modules() -> None:
    """Its __init__.py's docstring: the concern in one sentence, then one line per module (`- name.py: ...`) and
    subpackage (`- name/: ...`); nothing listed that is not there."""
    problems = []
    for package in _packages():
        docstring = ast.get_docstring(_tree(package / "__init__.py")) or ""
        where = package.relative_to(ROOT)
        if not docstring or "TODO" in docstring:
            problems.append(f"{where}: no docstring saying its concern")
            continue
        members = {path.name for path in package.glob("*.py") if path.name != "__init__.py"}
        members |= {f"{path.name}/" for path in package.iterdir() if (path / "__init__.py").is_file()}
        listed = set(re.findall(r"^- ([\w.]+/?): ", docstring, flags=re.MULTILINE))
        problems += [f"{where}: {member} is not listed" for member in sorted(members - listed)]
        problems += [f"{where}: lists {name}, which is not there" for name in sorted(listed - members)]
    assert not problems


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
    tree = _tree(ROOT / "agent" / "loop.py")
    imported = [name for name, _names, _where, _line in _statements(tree, "agent.loop", False)]
    forbidden = ("agent.worktree", "agent.gate", "agent.run", "git", "subprocess", "pathlib", "shutil")
    assert [name for name in imported if name.split(".")[0] in forbidden or name.startswith(forbidden)] == []


# `1 test(s)`, `2 branch(es)`: the product says `1 test` and `2 branches` (agent.safety.printable.counted).
_PARENTHESISED_PLURAL = re.compile(r"\b(?!http\()[a-z]+\(e?s\)")


def test_no_parenthesised_plurals_in_the_products_text() -> None:
    found = []
    for module, path in _modules().items():
        for node in ast.walk(_tree(path)):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and _PARENTHESISED_PLURAL.search(node.value)
            ):
                found.append(f"{module}:{node.lineno}: {node.value.strip()[:60]}")
    assert not found, found
