"""geo_refactor: extract validate coordinate. Static checks with ast; run from a folder one level below the repository."""

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


def range_checks(tree):
    """Comparisons against the latitude bound 90."""
    return sum(
        1
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        for value in [node.left, *node.comparators]
        if isinstance(value, ast.Constant) and value.value == 90
    )


class Test(unittest.TestCase):
    def test_the_helper_exists(self):
        function = function_nodes(parse("geo/validation.py"))["validate_coordinate"]
        self.assertEqual([arg.arg for arg in function.args.args], ["lat", "lon"])
        self.assertTrue(any(isinstance(node, ast.Raise) for node in ast.walk(function)))

    def test_both_modules_call_it_instead_of_checking_inline(self):
        for path in ("geo/distance.py", "geo/routes.py"):
            tree = parse(path)
            self.assertIn(("geo.validation", "validate_coordinate"), imported_names(tree), path)
            self.assertIn("validate_coordinate", call_names(tree), path)
            self.assertEqual(range_checks(tree), 0, path)


if __name__ == "__main__":
    unittest.main()
