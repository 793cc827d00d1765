"""The pytest zygote of a test session's local sandboxes: an interpreter that imported pytest once and forks, per
`python3 -m pytest ...` of a sandbox (support/zygote_client.py sends it), a run that goes on as that command would
have: the import of pytest was most of the CPU of the gate's small suites, and the fast tier runs some 140 of them.

The forked run gets what a fresh `python -m pytest` started by the client would have: the client's descriptors on
their numbers, its working directory, environment (os.environ replaced, the C environment with it), umask,
ignored and blocked signals and resource limits; sys.argv, sys.orig_argv and a fresh __main__ as `-m` makes them;
sys.path as the interpreter computes it (the working directory, then PYTHONPATH's entries made absolute, then
this interpreter's own, without duplicates); sys.pycache_prefix and sys.dont_write_bytecode from the environment,
the imported modules' __cached__ with them; stdio built as the interpreter builds it. What a fresh start would do
differently is declined (the client then execs the interpreter): a PYTHON* variable that sets a flag, another
locale, or a folder on the new path that holds a module of those imported here (the worktree's `inspect.py`
would have shadowed the standard library's). The one thing shared is the hash seed, drawn once per session; and
caches of pure functions warmed here (compiled regular expressions, inspect's map of the modules' files), which hold
what the run would have computed.

The requests, the forks, the runs' process groups and the client's state are support/zygote_server.py's. Run as
`python pytest_zygote.py OWNER_PID LISTENER_FD`, the listening socket inherited; it ends when the process OWNER_PID
does, or when asked (an empty request)."""

import sys

if sys.path and sys.path[0] == __file__.rpartition("/")[0]:
    del sys.path[0]  # support/: nothing of the tests is imported here
# This interpreter's own path; a run's is its working directory and PYTHONPATH's entries, then this.
_BASE_PATH = list(sys.path)
sys.dont_write_bytecode = True  # it reads the session's bytecode template (PYTHONPYCACHEPREFIX), writes nothing

import importlib  # noqa: E402 - after the interpreter's state above was read
import importlib.machinery  # noqa: E402
import importlib.util  # noqa: E402
import linecache  # noqa: E402
import os  # noqa: E402
import runpy  # noqa: E402
import site  # noqa: E402

sys.path.insert(0, __file__.rpartition("/")[0])
from zygote_server import Request, become_client, holds_module, imported_here, serve, settle  # noqa: E402 - support/'s, and only it

del sys.path[0]

import _pytest.config  # noqa: E402
import pytest  # noqa: E402, F401 - the point: every run starts with it imported

# And the plugins each run imports (a third of what a small suite's run took past `import pytest`), the parser's
# argcomplete module (it reads _ARGCOMPLETE, as here), and pdb, which the debugging plugin imports at each run's
# configure (each compiled then into the run's fresh bytecode prefix): the module reads nothing of the terminal, a
# Pdb() would (readline), and only a run makes one.
for _module in [*(f"_pytest.{plugin}" for plugin in _pytest.config.default_plugins), "_pytest._argcomplete"]:
    importlib.import_module(_module)
import pdb  # noqa: E402, F401


def _warm_caches() -> None:
    """What every run otherwise computes again from what is imported here, into caches of pure functions: the
    regular expressions the JUnit report escapes its text with, and for a failure's report (its source lines) the
    tokenizer's and inspect's, and inspect's map of the modules' files (the realpath of each, a third of such a
    run past the configuration). Not of this script: the run's __main__ is pytest's."""
    import inspect

    import _pytest.junitxml

    main = sys.modules.pop("__main__")
    try:
        inspect.getsource(_pytest.junitxml.bin_xml_escape.__code__)
    finally:
        sys.modules["__main__"] = main
    _pytest.junitxml.bin_xml_escape("")
    linecache.clearcache()


_warm_caches()
settle()

# A forked run's interpreter flags are this one's: a variable that would set another is declined. These three it
# takes from each request's environment.
_PATH_VARIABLES = {"PYTHONPATH", "PYTHONPYCACHEPREFIX", "PYTHONNOUSERSITE"}
# What the interpreter's start-up reads from the locale; and pytest's argcomplete, read when it is imported.
_SAME_AS_HERE = ("LC_ALL", "LC_CTYPE", "LANG", "_ARGCOMPLETE")
# Modules imported here: what a folder on a run's path may not hold, or the run would have imported the folder's.
_IMPORTED_HERE = imported_here()


def _split_path(variable: bytes | None, cwd: str) -> list[str]:
    if not variable:
        return []
    return [os.path.normpath(os.path.join(cwd, os.fsdecode(entry))) for entry in variable.split(b":")]


def _run_path(cwd: str, environment: dict[bytes, bytes]) -> list[str]:
    """sys.path of `python -m` in `cwd`: the folder first (not deduplicated: it is added after site ran), then
    PYTHONPATH's entries and this interpreter's, each once."""
    unique = list(dict.fromkeys([*_split_path(environment.get(b"PYTHONPATH"), cwd), *_BASE_PATH]))
    return [cwd, *unique]


def _declined(request: Request) -> bool:
    environment = request.environment
    flags = [key for key in environment if key.startswith(b"PYTHON") and os.fsdecode(key) not in _PATH_VARIABLES]
    if flags or not environment.get(b"PYTHONNOUSERSITE"):
        return True
    here = os.environb
    if any(environment.get(name.encode()) != here.get(name.encode()) for name in _SAME_AS_HERE):
        return True
    if request.command[1:3] != ["-m", "pytest"] or not os.path.isdir(request.cwd):
        return True
    path = _run_path(request.cwd, environment)
    added = [folder for folder in path if folder not in _BASE_PATH]
    if len(added) + len(_BASE_PATH) != len(path):  # PYTHONPATH named one of this interpreter's own
        return True
    return any(holds_module(folder, _IMPORTED_HERE) for folder in dict.fromkeys(added))


def _bytecode_prefix(environment: dict[bytes, bytes]) -> str | None:
    return os.fsdecode(environment.get(b"PYTHONPYCACHEPREFIX") or b"") or None


_prepared_prefix: list[str | None] = [sys.pycache_prefix]


def _admitted(request: Request) -> bool:
    """Unless declined, with the imported modules' __cached__ under the run's bytecode prefix already, here: set in
    the child, the writes to every module's dictionary and spec were a tenth of a small suite's run (the pages they
    copy)."""
    if _declined(request):
        return False
    prefix = _bytecode_prefix(request.environment)
    if prefix != _prepared_prefix[0]:
        sys.pycache_prefix = _prepared_prefix[0] = prefix  # this zygote writes no bytecode, and imports no more
        for module in list(sys.modules.values()):
            cached = getattr(module, "__cached__", None)
            if cached is not None and module.__file__ is not None and module.__file__.endswith(".py"):
                module.__cached__ = importlib.util.cache_from_source(module.__file__)
                if module.__spec__ is not None and module.__spec__.has_location:
                    module.__spec__.cached = module.__cached__
    return True


def become(request: Request) -> None:
    """In the forked child: the state a fresh `python -m pytest` of the client would start with."""
    become_client(request, _run_path(request.cwd, request.environment))
    sys.pycache_prefix = _bytecode_prefix(request.environment)
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    site.USER_BASE = site.USER_SITE = None
    site.getusersitepackages()  # from this HOME
    sys.argv = ["-m", *request.command[3:]]


request = serve(_admitted)
if request is not None:
    become(request)
    runpy._run_module_as_main("pytest")
