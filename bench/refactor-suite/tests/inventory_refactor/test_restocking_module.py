"""inventory_refactor: move restock. Static checks with ast; run from a folder one level below the repository."""

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
    def test_restock_lives_in_the_new_module(self):
        self.assertIn("restock", defined_functions(parse("inventory/restocking.py")))
        self.assertNotIn("restock", defined_functions(parse("inventory/stock.py")))
        self.assertIn("compute_stock_value", defined_functions(parse("inventory/stock.py")))

    def test_importers_import_it_from_there(self):
        for path in ("inventory/__init__.py", "inventory/cli.py"):
            names = imported_names(parse(path))
            self.assertIn(("inventory.restocking", "restock"), names, path)
            self.assertNotIn(("inventory.stock", "restock"), names, path)


if __name__ == "__main__":
    unittest.main()
