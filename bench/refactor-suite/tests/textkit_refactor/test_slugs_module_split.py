"""textkit_refactor: split cleaning module. Static checks with ast; run from a folder one level below the repository."""

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
    def test_slugs_has_the_slug_code(self):
        slugs = parse("textkit/slugs.py")
        self.assertTrue({"slugify", "_ascii"} <= set(defined_functions(slugs)))
        self.assertIn(("textkit.cleaning", "normalize_whitespace"), imported_names(slugs))

    def test_cleaning_keeps_only_cleaning(self):
        self.assertEqual(sorted(defined_functions(parse("textkit/cleaning.py"))), ["normalize_whitespace", "strip_punctuation"])

    def test_importers_take_slugify_from_slugs(self):
        for path in ("textkit/__init__.py", "textkit/report.py"):
            names = imported_names(parse(path))
            self.assertIn(("textkit.slugs", "slugify"), names, path)
            self.assertNotIn(("textkit.cleaning", "slugify"), names, path)


if __name__ == "__main__":
    unittest.main()
