"""inventory_refactor: extract format money. Static checks with ast; run from a folder one level below the repository."""

import ast
import unittest
from pathlib import Path


def parse(path):
    """A source file of the repository, parsed (the test runs one folder below the repository's root)."""
    return ast.parse(Path("..", path).read_text(encoding="utf-8"))


def function_nodes(tree):
    return {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def imported_names(tree):
    """(module, name) of every `from module import name`."""
    return {
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def called_name(node):
    """The name a call calls: f(...) and module.f(...) both give "f"."""
    if not isinstance(node, ast.Call):
        return None
    function = node.func
    return function.id if isinstance(function, ast.Name) else getattr(function, "attr", None)


def call_names(tree):
    return [called_name(node) for node in ast.walk(tree) if isinstance(node, ast.Call)]


def format_specs(tree):
    """The format specifications of the f-strings, e.g. ",.2f"."""
    return [
        ast.unparse(node.format_spec)
        for node in ast.walk(tree)
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None
    ]


class Test(unittest.TestCase):
    def test_the_helper_exists(self):
        functions = function_nodes(parse("inventory/formatting.py"))
        self.assertIn("format_money", functions)
        self.assertEqual([arg.arg for arg in functions["format_money"].args.args], ["value"])

    def test_reports_use_it_for_every_amount(self):
        reports = parse("inventory/reports.py")
        self.assertIn(("inventory.formatting", "format_money"), imported_names(reports))
        self.assertGreaterEqual(call_names(reports).count("format_money"), 3)
        self.assertEqual(format_specs(reports), [])


if __name__ == "__main__":
    unittest.main()
