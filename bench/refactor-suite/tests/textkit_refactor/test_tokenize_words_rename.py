"""textkit_refactor: rename split words. Static checks with ast; run from a folder one level below the repository."""

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


def exported(tree):
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return [element.value for element in node.value.elts]
    return []


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
        names = defined_functions(parse("textkit/words.py"))
        self.assertIn("tokenize_words", names)
        self.assertNotIn("split_words", names)

    def test_the_aliased_module_use_is_renamed(self):
        self.assertIn(("w", "tokenize_words"), attribute_uses(parse("textkit/stats.py")))

    def test_reexport_uses_the_new_name(self):
        package = parse("textkit/__init__.py")
        self.assertIn(("textkit.words", "tokenize_words"), imported_names(package))
        self.assertIn("tokenize_words", exported(package))

    def test_no_use_of_the_old_name_is_left(self):
        for path in python_files("textkit", "tests"):
            self.assertNotIn("split_words", identifiers(parse(path)), path)


if __name__ == "__main__":
    unittest.main()
