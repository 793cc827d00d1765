"""geo_refactor: points signature. Static checks with ast; run from a folder one level below the repository."""

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


def called_name(node):
    """The name a call calls: f(...) and module.f(...) both give "f"."""
    if not isinstance(node, ast.Call):
        return None
    function = node.func
    return function.id if isinstance(function, ast.Name) else getattr(function, "attr", None)


def calls_to(tree, name):
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and called_name(node) == name]


class Test(unittest.TestCase):
    def test_the_new_signature(self):
        function = function_nodes(parse("geo/distance.py"))["haversine"]
        self.assertEqual([arg.arg for arg in function.args.args], ["a", "b"])

    def test_every_caller_passes_two_points(self):
        calls = [
            call
            for path in python_files("geo", "tests")
            for name in ("haversine", "dist")
            for call in calls_to(parse(path), name)
        ]
        self.assertGreaterEqual(len(calls), 5)
        for call in calls:
            self.assertEqual(len(call.args), 2, ast.dump(call))
            self.assertFalse(any(isinstance(arg, ast.Starred) for arg in call.args), ast.dump(call))


if __name__ == "__main__":
    unittest.main()
