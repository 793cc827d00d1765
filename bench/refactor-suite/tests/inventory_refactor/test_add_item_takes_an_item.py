"""inventory_refactor: add item signature. Static checks with ast; run from a folder one level below the repository."""

import ast
import unittest
from pathlib import Path


def parse(path):
    """A source file of the repository, parsed (the test runs one folder below the repository's root)."""
    return ast.parse(Path("..", path).read_text(encoding="utf-8"))


def python_files(*folders):
    return [str(path.relative_to("..")) for folder in folders for path in sorted(Path("..", folder).rglob("*.py"))]


def function_nodes(tree):
    return {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def class_nodes(tree):
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def called_name(node):
    """The name a call calls: f(...) and module.f(...) both give "f"."""
    if not isinstance(node, ast.Call):
        return None
    function = node.func
    return function.id if isinstance(function, ast.Name) else getattr(function, "attr", None)


def method_calls(tree, name):
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name
    ]


class Test(unittest.TestCase):
    def test_the_new_signature(self):
        warehouse = class_nodes(parse("inventory/models.py"))["Warehouse"]
        method = function_nodes(warehouse)["add_item"]
        self.assertEqual([arg.arg for arg in method.args.args], ["self", "item"])

    def test_every_caller_passes_an_item(self):
        calls = [call for path in python_files("inventory", "tests") for call in method_calls(parse(path), "add_item")]
        self.assertGreaterEqual(len(calls), 3)
        for call in calls:
            self.assertEqual(len(call.args) + len(call.keywords), 1)
            self.assertEqual(called_name(call.args[0]) if call.args else None, "Item")


if __name__ == "__main__":
    unittest.main()
