"""The helper zygote of a test session's local sandboxes: an isolated interpreter (`python3 -I`, as the file and
symbol tools start theirs) that imported what their helpers (tools/in_sandbox/) import and forks, per
`python3 -I -c SOURCE` that a local sandbox's executor sends it, a process that runs SOURCE as that command would
have: the interpreter's start and those imports were nearly all of each of the fast tier's ~230 tool calls.

The forked process gets what a fresh `python3 -I -c SOURCE` would have: the client's state as the pytest zygote
gives it (support/zygote_server.py: descriptors, working directory, environment, umask, signals, resource limits,
stdio, a fresh __main__); sys.argv ['-c'] and sys.orig_argv; sys.path this interpreter's (-I: neither the working
directory nor PYTHONPATH); SOURCE compiled as `-c` compiles it (once per source, here), and an uncaught exception
reported and ended with as the interpreter does. The helpers' own modules are not kept imported: each run imports
them from their files, as it would. What would differ is declined (the executor then runs the command in its
shell): another interpreter or arguments, another locale. Nothing is served when one of the folders the helpers
put first on the path (FOLDER..., HELPERS_FOLDER among them) holds a module imported here: a fresh process would
import that one.

Run as `python3 -I helper_zygote.py OWNER_PID LISTENER_FD HELPERS_FOLDER FOLDER...`, the listening socket
inherited; it ends when the process OWNER_PID does, or when asked (an empty request)."""

import sys

# This interpreter's own path (-I: the script's folder is not on it), which the runs keep.
_BASE_PATH = list(sys.path)

import contextlib  # noqa: E402
import importlib  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402

sys.path.insert(0, __file__.rpartition("/")[0])
from zygote_server import Request, become_client, holds_module, imported_here, serve, settle  # noqa: E402 - support/'s

del sys.path[0]

_HELPERS_FOLDER, *_FOLDERS = sys.argv[3:]  # tools/in_sandbox/; what the symbol tools' helper puts first on the path


def _preload() -> set[str]:
    """The helpers' imports, found as the helpers find them; the helpers themselves are dropped again."""
    sys.path[:0] = _FOLDERS
    helpers = {entry.name[: -len(".py")] for entry in os.scandir(_HELPERS_FOLDER) if entry.name.endswith(".py")}
    helpers.discard("__init__")
    for helper in sorted(helpers):
        importlib.import_module(helper)
    for helper in helpers:
        del sys.modules[helper]
    sys.path[:] = _BASE_PATH
    return helpers


_HELPERS = _preload()
_IMPORTED_HERE = imported_here() - _HELPERS
settle()
# What the interpreter's start-up reads from the locale.
_SAME_AS_HERE = (b"LC_ALL", b"LC_CTYPE", b"LANG")
# Each source compiled once, here: the file tools' helper is its whole source, 15 kB, at each call.
_COMPILED: dict[str, object] = {}


def _declined(request: Request) -> bool:
    if len(request.command) != 4 or request.command[1:3] != ["-I", "-c"]:
        return True
    path = request.environment.get(b"PATH", b"").decode(errors="replace")
    if shutil.which(request.command[0], path=path) != sys.executable:  # python3 on the path, or its path
        return True
    if any(request.environment.get(name) != os.environb.get(name) for name in _SAME_AS_HERE):
        return True
    return not os.path.isdir(request.cwd)


def _admitted(request: Request) -> bool:
    """Unless declined, with its source compiled for the fork (and the next run of that source)."""
    if _declined(request):
        return False
    source = request.command[3]
    if source not in _COMPILED:
        with contextlib.suppress(SyntaxError, ValueError):  # the run compiles it, and reports the error as -c does
            _COMPILED[source] = compile(source, "<string>", "exec", dont_inherit=True)
    return True


def _become(request: Request) -> str:
    """In the forked child: the state a fresh `python3 -I -c SOURCE` starts with; SOURCE."""
    become_client(request, list(_BASE_PATH))
    sys.argv = ["-c"]
    return request.command[3]


if any(holds_module(folder, _IMPORTED_HERE) for folder in _FOLDERS):
    sys.exit(f"helper zygote: a folder of {_FOLDERS} holds a module imported here: not serving")
_request = serve(_admitted)
if _request is not None:
    _source = _become(_request)
    try:  # compiled as -c compiles it
        exec(
            _COMPILED.get(_source) or compile(_source, "<string>", "exec", dont_inherit=True),
            vars(sys.modules["__main__"]),
        )
    except BaseException as error:
        # Without this script's frame, which a fresh interpreter's report has not (a bare raise adds none).
        error.__traceback__ = error.__traceback__.tb_next if error.__traceback__ is not None else None
        raise
