import os
import sys
from pathlib import Path

# The tests' modules (as pytest rewrites their asserts) and the product's are compiled once and kept in their
# __pycache__ folders, which git ignores: where the environment sets PYTHONDONTWRITEBYTECODE, each session would
# rewrite and compile them all again (most of the fast tier's collection), and each CLI the tests start (which
# still reads bytecode) would compile the product again. The environment is left as it is for those processes.
sys.dont_write_bytecode = False

# The test doubles and fixtures (tests/support/: the scripted server and model, sample repositories, local
# sandboxes) are imported as `support.x` from this folder.
sys.path.insert(0, str(Path(__file__).parent))
pytest_plugins = ["support.llama_fixtures", "support.install_fixtures"]
# One copy of the interpreter's bytecode for every local sandbox of the session, its CLI child processes included
# (support/local_sandbox.py; their TMPDIR is a test's own).
from support.local_sandbox import BYTECODE_ENV, bytecode_path  # noqa: E402 - support/ is importable from here on

os.environ.setdefault(BYTECODE_ENV, str(bytecode_path()))
