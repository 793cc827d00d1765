"""What the session's zygotes share (support/pytest_zygote.py, support/helper_zygote.py): the requests of their
clients (support/zygote_client.py, and the local sandbox's executor for the tools' helpers), the fork of a run per
request, and the state of the client that a command it started would have had, taken in the forked child.

A request carries the client's descriptors, its working directory, its command (the interpreter, then its
arguments) and its environment; the zygote replies that the client should run the command itself (declined), or
with the forked run's pid and then its exit status, and whether the run's process group outlived it. Each run is a
session and process group of its own; the zygote kills that group when the client's connection closes (the client
killed with its command's group, at a timeout or when the sandbox closed) and when the session ends.
Single-threaded: it forks, and a fork of a threaded process keeps only the forking thread."""

import _imp
import contextlib
import fcntl
import gc
import importlib
import importlib.machinery
import io
import linecache
import os
import resource
import selectors
import signal
import socket
import struct
import sys
import tempfile
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field

EXEC, STARTED, EXITED = b"E", b"P", b"X"  # the replies (see zygote_client.py)
MAX_DESCRIPTORS = 253
_LINGER_POLL_S = 0.5


@dataclass
class Request:
    connection: socket.socket
    peer: int
    descriptors: list[tuple[int, int]]  # (here, the client's number)
    cwd: str
    command: list[str]  # the client's interpreter, then its arguments
    environment: dict[bytes, bytes]


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
    # Whether to fork the request's run, having prepared here what the fork takes over; False: a fresh start would
    # do something else (declined: the client runs the command itself).
    admitted: Callable[[Request], bool]
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


def send_request(
    connection: socket.socket, descriptors: list[int], cwd: str, command: list[str], environment: dict[str, str]
) -> None:
    """A client's request: `descriptors` become the run's 0, 1, 2... (support/zygote_client.py sends alike, with
    the interpreter's built-in modules alone, and its own descriptors on their numbers)."""
    numbers = " ".join(map(str, range(len(descriptors))))
    variables = [f"{name}={value}" for name, value in environment.items()]
    payload = b"\0".join(os.fsencode(part) for part in [numbers, cwd, str(len(command)), *command, *variables])
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, b"".join(fd.to_bytes(4, sys.byteorder) for fd in descriptors))]
    connection.sendmsg([len(payload).to_bytes(8, "little")], rights)
    connection.sendall(payload)


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
    return Request(connection, peer, descriptors_and_numbers, os.fsdecode(cwd), command, environment)


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
        if not zygote.admitted(request):
            for descriptor, _ in request.descriptors:
                os.close(descriptor)
            connection.sendall(EXEC)
            connection.close()
            return None
        return request if _start(zygote, request) else None
    except (OSError, ValueError):
        connection.close()
        return None


def _serve(zygote: Zygote) -> Request | None:
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


def serve(admitted: Callable[[Request], bool]) -> Request | None:
    """The zygote, run as `python ZYGOTE OWNER_PID LISTENER_FD`, the listening socket inherited: until the process
    OWNER_PID ends, or the zygote is asked to (an empty request), when it kills its runs and returns None; in the
    child forked for a request, that request."""
    owner, listening = map(int, sys.argv[1:3])
    listener = socket.socket(fileno=listening)
    zygote = Zygote(listener, os.pidfd_open(owner), admitted)
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(0))
    request = None
    try:
        request = _serve(zygote)
    finally:
        if request is None:  # the zygote ends: so do its runs
            for run in zygote.runs:
                _kill(run)
            with contextlib.suppress(OSError):
                os.unlink(listener.getsockname())
    return request


def settle() -> None:
    """Once the zygote imported what its runs would: that stays out of the collector's passes (gc.freeze: a run's
    collections would go through all of it, and copy each page they touch, a fifth of a small suite's run), and
    the importers' caches of the folders it read are dropped here, not in each run (which starts without them, as
    a fresh interpreter does): freed in a run, their listings' pages were copied, a third of its start."""
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    gc.collect()
    gc.freeze()


def imported_here() -> set[str]:
    """The modules imported here, by top-level name, that a folder on a run's path could have shadowed (the
    start-up's own too, and sitecustomize, which the start-up imports from the path); built-in and frozen modules
    are found before any folder is looked in."""
    return {
        top
        for top in {name.partition(".")[0] for name in sys.modules if name != "__main__"} | {"sitecustomize"}
        if top not in sys.builtin_module_names and not _imp.is_frozen(top)
    }


def holds_module(folder: str, names: set[str]) -> bool:
    """Whether `folder` on a run's path would have shadowed a module of `names`; True as well for what is no folder
    (a zip) or cannot be read."""
    try:
        entries = os.scandir(folder)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    suffixes = importlib.machinery.all_suffixes()
    with entries:
        for entry in entries:
            stem, dot, rest = entry.name.partition(".")
            if stem not in names:
                continue
            if dot and f".{rest}" in suffixes:
                return True
            if not dot and any(os.path.exists(f"{entry.path}/__init__{suffix}") for suffix in suffixes):
                return True
    return False


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


def become_client(request: Request, path: list[str]) -> None:
    """In the forked child: the client's process state, descriptors, working directory and environment, sys.path
    `path`, stdio and sys.orig_argv as a fresh start of its command has them, and a fresh __main__."""
    os.setsid()
    _take_process_state(request.peer)
    _take_descriptors(request.descriptors)
    os.chdir(request.cwd)
    os.environb.clear()
    os.environb.update(request.environment)
    time.tzset()
    sys.path[:] = path
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    tempfile.tempdir = None
    linecache.clearcache()
    _stdio()
    sys.orig_argv = list(request.command)
    fresh = types.ModuleType("__main__")
    fresh.__loader__ = importlib.machinery.BuiltinImporter
    fresh.__annotations__ = {}
    fresh.__builtins__ = sys.modules["builtins"]
    sys.modules["__main__"] = fresh
