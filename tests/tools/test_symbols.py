"""The symbol tools on a real repository in the real sandbox: find, rename (rope) and move, and their refusals."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from sandbox import DEFAULT_IMAGE, DockerSandbox, docker_client, require_image
from tools.base import ToolContext, ToolResult
from tools.registry import default_registry
from tools.symbols import sandbox_mounts

from support.repos import make_repo, restore_checkout

pytestmark = pytest.mark.docker

SHOP = {
    "shop/__init__.py": 'from shop.pricing import compute_total\n\n__all__ = ["compute_total"]\n',
    "shop/pricing.py": (
        "TAX = 0.2\n\n\ndef compute_total(items):\n"
        '    """compute_total adds the prices and the tax."""\n'
        "    return round(sum(items) * (1 + TAX), 2)\n\n\n"
        "def _tax(amount):\n    return amount * TAX\n"
    ),
    "shop/cart.py": (
        "from shop.pricing import compute_total\n\n\nclass Cart:\n"
        "    def __init__(self, items):\n        self.items = items\n\n"
        "    def total(self):\n        return compute_total(self.items)\n"
    ),
    "shop/checkout.py": (
        "import shop.pricing as pricing\n\n\ndef checkout(cart):\n"
        "    # the cart's compute_total, once more\n"
        "    return pricing.compute_total(cart.items)\n"
    ),
    "shop/report.py": ('from shop import pricing\n\n\ndef lookup():\n    return getattr(pricing, "compute_total")\n'),
    "tests/test_shop.py": (
        "from shop import compute_total\nfrom shop.cart import Cart\nfrom shop.checkout import checkout\n\n\n"
        "def test_totals():\n    assert compute_total([10]) == 12.0\n"
        "    assert checkout(Cart([10, 10])) == 24.0\n"
    ),
    "README.md": "Call compute_total for the price.\n",
    "web/app.js": "function compute_total(items) { return items.length; }\n// compute_total, in JavaScript\n"
    "const n = compute_total([1]);\n",
}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerSandbox]:
    repo = make_repo(tmp_path_factory.mktemp("symbols") / "repo", SHOP)
    client = docker_client()
    require_image(client, DEFAULT_IMAGE)
    mounts = [repo / ".git", *sandbox_mounts()]
    with DockerSandbox(DEFAULT_IMAGE, repo, run_id="test-symbols", client=client, read_only_paths=mounts) as box:
        yield box


@pytest.fixture
def context(sandbox: DockerSandbox) -> ToolContext:
    restore_checkout(sandbox.workspace)
    return ToolContext(executor=sandbox, test_command=None, command_timeout_s=120, output_chars=20_000)


def call(context: ToolContext, name: str, arguments: dict) -> ToolResult:
    return default_registry().dispatch(name, json.dumps(arguments), context)


def shell(sandbox: DockerSandbox, command: str) -> str:
    result = sandbox.execute(command, timeout_s=120)
    assert result.exit_code == 0, result.output
    return result.output


def test_find_symbol_lists_definitions_first_and_strings_and_comments_apart(context: ToolContext) -> None:
    found = call(context, "find_symbol", {"name": "compute_total"})
    assert not found.is_error, found.text
    lines = found.text.splitlines()
    assert lines[0].startswith("'compute_total': 2 definitions, 7 references")
    assert "javascript: tree-sitter" in lines[0] and "python: python's ast and tokenizer" in lines[0]
    definitions = lines[lines.index("definitions (2):") + 1 : lines.index("references (7):")]
    assert definitions == [
        "shop/pricing.py:4:5: [function] def compute_total(items):",
        "web/app.js:1:10: [function_declaration] function compute_total(items) { return items.length; }",
    ]
    references = lines[lines.index("references (7):") + 1 :]
    assert "shop/checkout.py:6:20: [code] return pricing.compute_total(cart.items)" in references
    assert "shop/cart.py:1:26: [import] from shop.pricing import compute_total" in references
    apart = lines[lines.index("in strings, comments and other files (not code) (6):") + 1 :]
    assert "README.md:1:6: [other file] Call compute_total for the price." in apart
    assert 'shop/report.py:5:29: [string] return getattr(pricing, "compute_total")' in apart
    assert "shop/checkout.py:5:5: [comment] # the cart's compute_total, once more" in apart
    only_functions = call(context, "find_symbol", {"name": "TAX", "kind": "variable"})
    assert "shop/pricing.py:1:1: [variable] TAX = 0.2" in only_functions.text


def test_rename_crosses_modules_and_an_import_as_and_lists_what_it_left(
    context: ToolContext, sandbox: DockerSandbox
) -> None:
    renamed = call(context, "rename_symbol", {"path": "shop/pricing.py", "line": 4, "column": 5, "new_name": "total"})
    assert not renamed.is_error, renamed.text
    workspace = sandbox.workspace
    assert "def total(items):" in (workspace / "shop/pricing.py").read_text()
    assert "from shop.pricing import total\n" in (workspace / "shop/cart.py").read_text()
    assert "return total(self.items)" in (workspace / "shop/cart.py").read_text()
    assert "return pricing.total(cart.items)" in (workspace / "shop/checkout.py").read_text()
    assert (workspace / "shop/__init__.py").read_text().startswith("from shop.pricing import total\n")
    assert "from shop import total\n" in (workspace / "tests/test_shop.py").read_text()
    left = renamed.text.split("NOT renamed")[1]
    assert 'shop/report.py:5:29: [string] return getattr(pricing, "compute_total")' in left, "a dynamic use"
    assert '__all__ = ["compute_total"]' in left and "web/app.js:1:10" in left
    assert 'getattr(pricing, "compute_total")' in (workspace / "shop/report.py").read_text(), "strings stay"
    assert "shop/checkout.py:6: return pricing.total(cart.items)" in renamed.text.split("NOT renamed")[0]
    assert not (workspace / ".ropeproject").exists(), "rope keeps nothing of its own in the worktree"


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"path": "shop/pricing.py", "line": 4, "column": 5, "new_name": "total-price"}, "not a valid identifier"),
        ({"path": "shop/pricing.py", "line": 4, "column": 5, "new_name": "class"}, "not a valid identifier"),
        ({"path": "shop/pricing.py", "line": 4, "column": 5, "new_name": "_tax"}, "'_tax' already exists"),
        ({"path": "shop/pricing.py", "line": 4, "column": 1, "new_name": "total"}, "no identifier at"),
        ({"path": "shop/pricing.py", "line": 99, "column": 1, "new_name": "total"}, "line 99 does not exist"),
        ({"path": "shop/missing.py", "line": 1, "column": 1, "new_name": "total"}, "does not exist"),
        ({"path": "README.md", "line": 1, "column": 6, "new_name": "total"}, "not source code of a language"),
        ({"path": "web/app.js", "line": 2, "column": 4, "new_name": "total"}, "is not an identifier in code"),
        ({"path": "../outside.py", "line": 1, "column": 1, "new_name": "total"}, "'..' is not allowed"),
    ],
)
def test_bad_renames_get_one_error_and_change_nothing(
    context: ToolContext, sandbox: DockerSandbox, arguments: dict, reason: str
) -> None:
    refused = call(context, "rename_symbol", arguments)
    assert refused.is_error and reason in refused.text and len(refused.text.splitlines()) == 1, refused.text
    assert shell(sandbox, "git status --porcelain") == ""


def test_other_languages_get_a_labelled_identifier_rename(context: ToolContext, sandbox: DockerSandbox) -> None:
    renamed = call(context, "rename_symbol", {"path": "web/app.js", "line": 3, "column": 11, "new_name": "total"})
    assert not renamed.is_error, renamed.text
    assert renamed.text.startswith(
        "renamed 'compute_total' to 'total' with a tree-sitter identifier rename (javascript; NOT scope-aware"
    )
    assert (sandbox.workspace / "web/app.js").read_text() == (
        "function total(items) { return items.length; }\n// compute_total, in JavaScript\nconst n = total([1]);\n"
    )
    assert "web/app.js:2: [comment] not renamed" in renamed.text
    assert shell(sandbox, "git status --porcelain") == " M web/app.js\n", "Python files are another language"


def test_a_file_that_does_not_parse_is_refused_whole(context: ToolContext, sandbox: DockerSandbox) -> None:
    (sandbox.workspace / "shop/cart.py").write_text("from shop.pricing import compute_total\ndef broken(:\n")
    refused = call(context, "rename_symbol", {"path": "shop/cart.py", "line": 1, "column": 26, "new_name": "total"})
    assert refused.is_error and "'shop/cart.py' does not parse (line 2" in refused.text
    assert shell(sandbox, "git status --porcelain") == " M shop/cart.py\n"


def test_move_updates_every_import_and_the_tests_still_pass(context: ToolContext, sandbox: DockerSandbox) -> None:
    moved = call(
        context, "move_symbol", {"path": "shop/pricing.py", "name": "compute_total", "to_path": "shop/totals.py"}
    )
    assert not moved.is_error, moved.text
    workspace = sandbox.workspace
    assert "def compute_total(items):" in (workspace / "shop/totals.py").read_text()
    assert "def compute_total" not in (workspace / "shop/pricing.py").read_text()
    assert "from shop.totals import compute_total" in (workspace / "shop/cart.py").read_text()
    assert (workspace / "shop/__init__.py").read_text().startswith("from shop.totals import compute_total\n")
    assert "pricing.compute_total" not in (workspace / "shop/checkout.py").read_text()
    assert "1 passed" in shell(sandbox, "python3 -m pytest -q -p no:cacheprovider tests")


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"path": "shop/pricing.py", "name": "nothing", "to_path": "shop/x.py"}, "no top-level function or class"),
        ({"path": "shop/pricing.py", "name": "compute_total", "to_path": "shop/__init__.py"}, "already defines"),
        ({"path": "shop/pricing.py", "name": "compute_total", "to_path": "shop/pricing.py"}, "the same module"),
        ({"path": "shop/pricing.py", "name": "compute_total", "to_path": "web/app.js"}, "not a .py file"),
        ({"path": "shop/pricing.py", "name": "compute total", "to_path": "shop/x.py"}, "not a valid identifier"),
    ],
)
def test_bad_moves_get_one_error_and_change_nothing(
    context: ToolContext, sandbox: DockerSandbox, arguments: dict, reason: str
) -> None:
    refused = call(context, "move_symbol", arguments)
    assert refused.is_error and reason in refused.text, refused.text
    assert shell(sandbox, "git status --porcelain") == ""


def test_a_linked_module_is_neither_read_nor_written(context: ToolContext, sandbox: DockerSandbox) -> None:
    outside = "from shop.pricing import compute_total\nvalue = compute_total([1])\n"
    shell(sandbox, f"printf '%s' '{outside}' > /tmp/outside.py && ln -s /tmp/outside.py shop/linked.py")
    renamed = call(context, "rename_symbol", {"path": "shop/pricing.py", "line": 4, "column": 5, "new_name": "total"})
    assert not renamed.is_error, renamed.text
    assert shell(sandbox, "cat /tmp/outside.py") == outside
    assert "shop/linked.py" not in renamed.text
