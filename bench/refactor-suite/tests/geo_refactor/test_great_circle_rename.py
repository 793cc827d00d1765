"""geo_refactor: rename haversine. Static checks with ast; run from a folder one level below the repository."""

import ast
import unittest
from pathlib import Path


def parse(path):
    """A source file of the repository, parsed (the test runs one folder below the repository's root)."""
    return ast.parse(Path("..", path).read_text(encoding="utf-8"))


def python_files(*folders):
    return [str(path.relative_to("..")) for folder in folders for path in sorted(Path("..", folder).rglob("*.py"))]


def defined_functions(tree):
    return [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def attribute_uses(tree):
    return {
        (node.value.id, node.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
    }


def imported_names(tree):
    """(module, name) of every `from module import name`."""
    return {
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def identifiers(tree):
    """Every name the code uses: variables, attributes, definitions, imports and keyword arguments."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.update(part for part in (node.name.split(".")[-1], node.asname) if part)
    return names


class Test(unittest.TestCase):
    def test_defined_under_the_new_name(self):
        names = defined_functions(parse("geo/distance.py"))
        self.assertIn("great_circle_km", names)
        self.assertNotIn("haversine", names)

    def test_the_aliased_import_is_renamed(self):
        self.assertIn(("geo.distance", "great_circle_km"), imported_names(parse("geo/routes.py")))
        self.assertIn(("distance", "great_circle_km"), attribute_uses(parse("geo/nearby.py")))

    def test_no_use_of_the_old_name_is_left(self):
        for path in python_files("geo", "tests"):
            self.assertNotIn("haversine", identifiers(parse(path)), path)


if __name__ == "__main__":
    unittest.main()
