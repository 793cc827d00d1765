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

Each run is a session and process group of its own; the zygote kills that group when the client's connection
closes (the client killed with its command's group, at a timeout or when the sandbox closed) and when the session
ends. Single-threaded: it forks, and a fork of a threaded process keeps only the forking thread.

Run as `python pytest_zygote.py OWNER_PID LISTENER_FD`, the listening socket inherited; it ends when the process
OWNER_PID does, or when asked (an empty request)."""

import sys

if sys.path and sys.path[0] == __file__.rpartition("/")[0]:
    del sys.path[0]  # support/: nothing of the tests is imported here
# This interpreter's own path; a run's is its working directory and PYTHONPATH's entries, then this.
_BASE_PATH = list(sys.path)
sys.dont_write_bytecode = True  # it reads the session's bytecode template (PYTHONPYCACHEPREFIX), writes nothing

import _imp  # noqa: E402 - after the interpreter's state above was read
import contextlib  # noqa: E402
import fcntl  # noqa: E402
import gc  # noqa: E402
import importlib  # noqa: E402
import importlib.machinery  # noqa: E402
import importlib.util  # noqa: E402
import io  # noqa: E402
import linecache  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import runpy  # noqa: E402
import selectors  # noqa: E402
import signal  # noqa: E402
import site  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

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

# What was imported stays out of the collector's passes (gc.freeze): a run's collections (pytest collects twice at
# its end) would go through all of it, and copy each page they touch, a fifth of a small suite's run.
gc.collect()
gc.freeze()

EXEC, STARTED, EXITED = b"E", b"P", b"X"  # the replies (see zygote_client.py)
MAX_DESCRIPTORS = 253
# A forked run's interpreter flags are this one's: a variable that would set another is declined. These three it
# takes from each request's environment.
_PATH_VARIABLES = {"PYTHONPATH", "PYTHONPYCACHEPREFIX", "PYTHONNOUSERSITE"}
# What the interpreter's start-up reads from the locale; and pytest's argcomplete, read when it is imported.
_SAME_AS_HERE = ("LC_ALL", "LC_CTYPE", "LANG", "_ARGCOMPLETE")
_LINGER_POLL_S = 0.5
# Modules imported here, by top-level name: what a folder on a run's path may not hold, or the run would have
# imported the folder's (the start-up's own too, and sitecustomize: PYTHONPATH's folders are on the path when the
# start-up imports them). Built-in and frozen modules are found before any folder is looked in.
_IMPORTED_HERE = {
    top
    for top in {name.partition(".")[0] for name in sys.modules if name != "__main__"} | {"sitecustomize"}
    if top not in sys.builtin_module_names and not _imp.is_frozen(top)
}
_SUFFIXES = tuple(importlib.machinery.all_suffixes())


@dataclass
class Request:
    connection: socket.socket
    peer: int
    descriptors: list[tuple[int, int]]  # (here, the client's number)
    cwd: str
    command: list[str]  # the client's interpreter, then its arguments: -m pytest ...
    environment: dict[bytes, bytes]
    path: list[str]


@dataclass
class Run:
    pid: int
    pidfd: int
    connection: socket.socket | None
    lingering: bool = False


@dataclass
class Zygote:
    listener: socket.socket
    owner: int  # a pidfd of the session's process
    selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    runs: list[Run] = field(default_factory=list)

    def close_in_child(self, request: Request) -> None:
        """A run keeps nothing of the zygote's: its sockets, the other runs' connections."""
        self.selector.close()
        self.listener.close()
        os.close(self.owner)
        for run in self.runs:
            os.close(run.pidfd)
            if run.connection is not None:
                run.connection.close()
        request.connection.close()


def _split_path(variable: bytes | None, cwd: str) -> list[str]:
    if not variable:
        return []
    return [os.path.normpath(os.path.join(cwd, os.fsdecode(entry))) for entry in variable.split(b":")]


def _run_path(cwd: str, environment: dict[bytes, bytes]) -> list[str]:
    """sys.path of `python -m` in `cwd`: the folder first (not deduplicated: it is added after site ran), then
    PYTHONPATH's entries and this interpreter's, each once."""
    unique = list(dict.fromkeys([*_split_path(environment.get(b"PYTHONPATH"), cwd), *_BASE_PATH]))
    return [cwd, *unique]


def _holds_module_imported_here(folder: str) -> bool:
    """Whether `folder` on a run's path would have shadowed a module this interpreter imported; True as well for
    what is no folder (a zip) or cannot be read."""
    try:
        entries = os.scandir(folder)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    with entries:
        for entry in entries:
            stem, dot, rest = entry.name.partition(".")
            if stem not in _IMPORTED_HERE:
                continue
            if dot and f".{rest}" in _SUFFIXES:
                return True
            if not dot and any(os.path.exists(f"{entry.path}/__init__{suffix}") for suffix in _SUFFIXES):
                return True
    return False


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
    added = [folder for folder in request.path if folder not in _BASE_PATH]
    if len(added) + len(_BASE_PATH) != len(request.path):  # PYTHONPATH named one of this interpreter's own
        return True
    return any(_holds_module_imported_here(folder) for folder in dict.fromkeys(added))


def _receive_exactly(connection: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = connection.recv(min(size, 1 << 20))
        if not chunk:
            raise ConnectionError("the client went away mid-request")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _read_request(connection: socket.socket) -> Request | None:
    """The client's request; None for the session's request to stop (an empty one)."""
    header, descriptors, _, _ = socket.recv_fds(connection, 8, MAX_DESCRIPTORS)
    try:
        header += _receive_exactly(connection, 8 - len(header))
        payload = _receive_exactly(connection, int.from_bytes(header, "little"))
    except BaseException:
        for descriptor in descriptors:
            os.close(descriptor)
        raise
    if not payload:
        return None
    numbers, cwd, count, *rest = payload.split(b"\0")
    command = [os.fsdecode(part) for part in rest[: int(count)]]
    environment = dict(item.partition(b"=")[::2] for item in rest[int(count) :])
    peer, _, _ = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    targets = [int(number) for number in numbers.split()]
    if len(targets) != len(descriptors):
        for descriptor in descriptors:
            os.close(descriptor)
        raise ConnectionError("the client's descriptors did not arrive")
    descriptors_and_numbers = list(zip(descriptors, targets, strict=True))
    path = _run_path(os.fsdecode(cwd), environment)
    return Request(connection, peer, descriptors_and_numbers, os.fsdecode(cwd), command, environment, path)


def _kill(run: Run) -> None:
    """The run's process group: what it started too, as killing the command's group would have."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(run.pid, signal.SIGKILL)
    if run.pidfd >= 0:  # not reaped yet; maybe not yet the leader of its group
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(run.pidfd, signal.SIGKILL)


def _group_alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _forget_connection(zygote: Zygote, run: Run) -> None:
    if run.connection is not None:
        zygote.selector.unregister(run.connection)
        run.connection.close()
        run.connection = None
    if run.pidfd < 0:
        zygote.runs.remove(run)


def _on_exit(zygote: Zygote, run: Run) -> None:
    _, status = os.waitpid(run.pid, 0)
    zygote.selector.unregister(run.pidfd)
    os.close(run.pidfd)
    run.pidfd = -1
    if run.connection is None:
        zygote.runs.remove(run)
        return
    run.lingering = _group_alive(run.pid)
    reply = EXITED + os.waitstatus_to_exitcode(status).to_bytes(4, "little", signed=True)
    try:
        run.connection.sendall(reply + (b"1" if run.lingering else b"0"))
    except OSError:
        run.lingering = False
    if not run.lingering:
        _forget_connection(zygote, run)


def _on_hangup(zygote: Zygote, run: Run) -> None:
    """The client's connection is readable: it closed (the client was killed, or ended); the client sends
    nothing else."""
    if run.connection is None:  # forgotten by the exit handled just before, in the same batch of events
        return
    try:
        data = run.connection.recv(64)
    except OSError:
        data = b""
    if not data:
        _kill(run)
        _forget_connection(zygote, run)


def _start(zygote: Zygote, request: Request) -> bool:
    """Fork the run: True in the child."""
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        zygote.close_in_child(request)
        return True
    for descriptor, _ in request.descriptors:
        os.close(descriptor)  # the client's pipes close when the run and the client are done with them
    run = Run(pid, os.pidfd_open(pid), request.connection)
    zygote.runs.append(run)
    request.connection.sendall(STARTED + pid.to_bytes(4, "little"))
    zygote.selector.register(run.pidfd, selectors.EVENT_READ, (_on_exit, run))
    request.connection.setblocking(False)
    zygote.selector.register(request.connection, selectors.EVENT_READ, (_on_hangup, run))
    return False


def _accept(zygote: Zygote) -> Request | None:
    """A request from the listener: the request, in the run's child; None in the zygote."""
    connection, _ = zygote.listener.accept()
    try:
        connection.settimeout(10)  # a client sends its request at once
        request = _read_request(connection)
        if request is None:
            raise SystemExit(0)
        if _declined(request):
            for descriptor, _ in request.descriptors:
                os.close(descriptor)
            connection.sendall(EXEC)
            connection.close()
            return None
        return request if _start(zygote, request) else None
    except (OSError, ValueError):
        connection.close()
        return None


def serve(zygote: Zygote) -> Request | None:
    """Until the session ends; returns a request in the child forked for it."""
    zygote.selector.register(zygote.listener, selectors.EVENT_READ, None)
    zygote.selector.register(zygote.owner, selectors.EVENT_READ, "owner")
    while True:
        lingering = [run for run in zygote.runs if run.lingering]
        for run in lingering:
            if not _group_alive(run.pid):
                run.lingering = False
                _forget_connection(zygote, run)
        for key, _ in zygote.selector.select(_LINGER_POLL_S if lingering else None):
            if key.data == "owner":
                return None
            if key.data is None:
                request = _accept(zygote)
                if request is not None:
                    return request
            else:
                handler, run = key.data
                handler(zygote, run)


def _peer_status(peer: int) -> dict[str, str]:
    with open(f"/proc/{peer}/status") as status:
        return dict(line.rstrip("\n").partition(":\t")[::2] for line in status)


def _take_process_state(peer: int) -> None:
    """The client's umask, ignored and blocked signals and resource limits: what exec would have kept."""
    status = _peer_status(peer)
    os.umask(int(status["Umask"], 8))
    ignored, blocked = int(status["SigIgn"], 16), int(status["SigBlk"], 16)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the zygote's own
    for number in signal.valid_signals():
        if ignored >> (number - 1) & 1 and number not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(number, signal.SIG_IGN)
    signal.pthread_sigmask(
        signal.SIG_SETMASK, {number for number in signal.valid_signals() if blocked >> (number - 1) & 1}
    )
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            limit = resource.prlimit(peer, getattr(resource, name))
            if limit != resource.getrlimit(getattr(resource, name)):
                with contextlib.suppress(ValueError, OSError):  # above this hard limit: it never was below
                    resource.setrlimit(getattr(resource, name), limit)


def _take_descriptors(descriptors: list[tuple[int, int]]) -> None:
    """The client's descriptors on their numbers, and no other."""
    top = max([number for _, number in descriptors] + [int(name) for name in os.listdir("/proc/self/fd")]) + 1
    moved = [(fcntl.fcntl(descriptor, fcntl.F_DUPFD, top), number) for descriptor, number in descriptors]
    keep = {descriptor for descriptor, _ in moved}
    for name in os.listdir("/proc/self/fd"):
        if int(name) not in keep:
            with contextlib.suppress(OSError):
                os.close(int(name))
    for descriptor, number in moved:
        os.dup2(descriptor, number)
    for descriptor, _ in moved:
        os.close(descriptor)


def _stdio() -> None:
    """sys.stdin, stdout and stderr as the interpreter's start-up makes them, on the descriptors now there."""
    streams = ((0, "stdin", "r", sys.__stdin__), (1, "stdout", "w", sys.__stdout__), (2, "stderr", "w", sys.__stderr__))
    for number, name, mode, zygotes in streams:
        try:
            os.fstat(number)
        except OSError:
            stream = None
        else:
            buffer = open(number, f"{mode}b", -1, closefd=False)  # noqa: SIM115 - sys owns it
            buffer.raw.name = f"<{name}>"
            line_buffering = buffer.raw.isatty() or number == 2
            stream = io.TextIOWrapper(buffer, zygotes.encoding, zygotes.errors, "\n", line_buffering, False)
            stream.mode = mode
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def become(request: Request) -> None:
    """In the forked child: the state a fresh `python -m pytest` of the client would start with."""
    os.setsid()
    _take_process_state(request.peer)
    _take_descriptors(request.descriptors)
    os.chdir(request.cwd)
    os.environb.clear()
    os.environb.update(request.environment)
    time.tzset()
    sys.path[:] = request.path
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    sys.pycache_prefix = os.environ.get("PYTHONPYCACHEPREFIX") or None
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    for module in list(sys.modules.values()):
        cached = getattr(module, "__cached__", None)
        if cached is not None and module.__file__ is not None and module.__file__.endswith(".py"):
            module.__cached__ = importlib.util.cache_from_source(module.__file__)
            if module.__spec__ is not None and module.__spec__.has_location:
                module.__spec__.cached = module.__cached__
    site.USER_BASE = site.USER_SITE = None
    site.getusersitepackages()  # from this HOME
    tempfile.tempdir = None
    linecache.clearcache()
    _stdio()
    sys.argv = ["-m", *request.command[3:]]
    sys.orig_argv = list(request.command)
    fresh = types.ModuleType("__main__")
    fresh.__loader__ = importlib.machinery.BuiltinImporter
    fresh.__annotations__ = {}
    fresh.__builtins__ = sys.modules["builtins"]
    sys.modules["__main__"] = fresh


def main() -> None:
    owner, listening = map(int, sys.argv[1:])
    listener = socket.socket(fileno=listening)
    zygote = Zygote(listener, os.pidfd_open(owner))
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(0))
    request = None
    try:
        request = serve(zygote)
    finally:
        if request is None:  # the zygote ends: so do its runs
            for run in zygote.runs:
                _kill(run)
            with contextlib.suppress(OSError):
                os.unlink(listener.getsockname())
    if request is not None:
        become(request)
        runpy._run_module_as_main("pytest")


main()
