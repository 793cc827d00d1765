"""geo_refactor: move route length. Static checks with ast; run from a folder one level below the repository."""

import ast
import unittest
from pathlib import Path


def parse(path):
    """A source file of the repository, parsed (the test runs one folder below the repository's root)."""
    return ast.parse(Path("..", path).read_text(encoding="utf-8"))


def defined_functions(tree):
    return [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def imported_names(tree):
    """(module, name) of every `from module import name`."""
    return {
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


class Test(unittest.TestCase):
    def test_route_length_lives_in_distance(self):
        self.assertIn("route_length", defined_functions(parse("geo/distance.py")))
        routes = defined_functions(parse("geo/routes.py"))
        self.assertNotIn("route_length", routes)
        self.assertIn("longest_leg", routes)

    def test_the_package_imports_it_from_distance(self):
        names = imported_names(parse("geo/__init__.py"))
        self.assertIn(("geo.distance", "route_length"), names)
        self.assertNotIn(("geo.routes", "route_length"), names)


if __name__ == "__main__":
    unittest.main()
