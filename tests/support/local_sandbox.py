"""Sandboxes without Docker, for the tests of the run's pipeline that do not test Docker (runner, resume, fleet) and the
loop's unit tests: each command runs as a host subprocess in the task's worktree. Only scripts the tests wrote run
here (scripted models, sample repositories); the real sandbox has its own tests and one e2e run per path.

What the container gives a command, a LocalSandbox gives it too, so the pipeline cannot tell: the worktree as its
working directory (the file tools confine paths to it), a private HOME and TMPDIR of its own, the gate's absolute
report folder (/tmp/.refactor-agent) mapped into that private folder (tasks in parallel and other tests share the
host's /tmp), a process group of its own, killed at a timeout and when the sandbox closes, and `python3` with this
interpreter's libraries (pytest and rope, as the image has them; not refactor-agent). The gate runs the suite with a
fresh PYTHONPYCACHEPREFIX (no bytecode of the model's is ever read), in which the interpreter would compile pytest
and the standard library again at every run (two seconds each); an image's interpreter could bring that bytecode
along, and here a fresh prefix starts with links to the interpreter's own (bytecode_template), never with any of the
worktree's. `python3 -m pytest` starts in the session's pytest zygote (support/pytest_zygote.py), with pytest imported:
its import was most of the CPU time of the gate's runs of small suites; such a run needs no links. The file and
symbol tools' `python3 -I -c HELPER` is forked by the session's helper zygote (support/helper_zygote.py), which the
executor asks itself: the interpreter's start and the helper's imports were nearly all of each tool call."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import selectors
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import git

from agent.gate.suite import REPORT_DIR
from agent.gate.test_command import choose_test_command
from agent.protocol.config import RunConfig
from agent.protocol.records import EnvironmentRecord
from sandbox import ExecResult, SandboxLimits
from tools.symbols import sandbox_mounts

from support.zygote_server import STARTED, send_request


class LocalExecutor:
    """Commands as host subprocesses in `workspace`, in a process group of their own; without an `environment`, the
    test process's, with the sandbox's interpreter as `python3` (a version manager's shim on PATH, pyenv's, took 60 ms
    of each of the file tools' helper starts)."""

    def __init__(self, workspace: Path, environment: dict[str, str] | None = None, report_dir: Path | None = None):
        self.workspace = workspace
        self.environment = environment
        self.report_dir = report_dir
        self.commands: list[str] = []
        self._groups: list[int] = []
        self._lingering: list[socket.socket] = []  # the helper zygote's runs whose group outlived them

    def execute(
        self,
        command: str,
        *,
        timeout_s: float | None = None,
        max_output_bytes: int = 256_000,
        stdin: bytes | None = None,
    ) -> ExecResult:
        self.commands.append(command)
        if self.report_dir is not None:
            command = command.replace(REPORT_DIR, str(self.report_dir))
        started = time.monotonic()
        helper = _helper_request(command, self.environment, self.workspace)
        if helper is not None:
            result = self._in_helper_zygote(*helper, stdin or b"", timeout_s, max_output_bytes, started)
            if result is not None:
                return result
        process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=self.workspace,
            env=self.environment if self.environment is not None else _host_environment(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._groups.append(process.pid)
        try:
            data, _ = process.communicate(stdin if stdin is not None else b"", timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            self._kill(process.pid)
            data, _ = process.communicate()
            timed_out = True
        return ExecResult(
            exit_code=None if timed_out else process.returncode,
            output=data[:max_output_bytes].decode(errors="replace"),
            total_bytes=len(data),
            truncated=len(data) > max_output_bytes,
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
        )

    def _in_helper_zygote(
        self,
        command: list[str],
        environment: dict[str, str],
        stdin: bytes,
        timeout_s: float | None,
        max_output_bytes: int,
        started: float,
    ) -> ExecResult | None:
        """`python3 -I -c SOURCE` (`command`) forked by the session's helper zygote (support/helper_zygote.py) with
        what bash would have given the interpreter: the pipes on 0, 1 and 2 (stderr into stdout), the workspace,
        `environment`; None where the zygote is not there or declines."""
        address = helper_zygote_socket()
        if address is None:
            return None
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stdin_read, stdin_write = os.pipe()
        output_read, output_write = os.pipe()
        try:
            connection.connect(str(address))
            send_request(
                connection, [stdin_read, output_write, output_write], os.fspath(self.workspace), command, environment
            )
            reply = _receive(connection, 5)
        except OSError:
            reply = b""
        finally:
            os.close(stdin_read)
            os.close(output_write)
        if reply[:1] != STARTED or len(reply) < 5:
            for descriptor in (stdin_write, output_read):
                os.close(descriptor)
            connection.close()
            return None
        pid = int.from_bytes(reply[1:5], "little")
        self._groups.append(pid)  # its own (the zygote made it a session's leader)
        deadline = None if timeout_s is None else started + timeout_s
        data, timed_out = _communicate(stdin_write, output_read, stdin, deadline)
        status = b""
        if not timed_out:
            with contextlib.suppress(OSError):
                connection.settimeout(None if deadline is None else max(deadline - time.monotonic(), 0.001))
                status = _receive(connection, 6)
            timed_out = len(status) < 6
        if timed_out:  # its group killed, as the command's would be; the zygote kills it too as the connection closes
            self._kill(pid)
            connection.close()
            data += _drain(output_read)
        elif status[5:6] == b"1":
            self._lingering.append(connection)  # the zygote kills what is left when the sandbox closes
        else:
            connection.close()
        os.close(output_read)
        return ExecResult(
            exit_code=None if timed_out else int.from_bytes(status[1:5], "little", signed=True),
            output=data[:max_output_bytes].decode(errors="replace"),
            total_bytes=len(data),
            truncated=len(data) > max_output_bytes,
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
        )

    @staticmethod
    def _kill(group: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)

    def close(self) -> None:
        """What its commands left running (`cmd &`), as removing a container would."""
        for group in self._groups:
            self._kill(group)
        for connection in self._lingering:
            connection.close()
        self._lingering.clear()


@functools.lru_cache(maxsize=64)
def _is_wrapper(path: str) -> bool:
    """Whether `path` is a local sandbox's python3 (_WRAPPER below), by its first two lines."""
    try:
        with open(path, "rb") as wrapper:
            return wrapper.read(300).split(b"\n")[:2] == [line.encode() for line in _WRAPPER.split("\n")[:2]]
    except OSError:
        return False


@functools.lru_cache(maxsize=16)
def _quoted_source(command: str) -> str | None:
    """SOURCE of `python3 -I -c SOURCE`, the tools' helper commands, where SOURCE is one single-quoted word (as
    shlex.quote makes it): what bash passes on as it is."""
    prefix = "python3 -I -c "
    quoted = command.removeprefix(prefix)
    if quoted == command or len(quoted) < 2 or quoted[0] != "'" or quoted[-1] != "'":
        return None
    source = quoted[1:-1].replace("'\"'\"'", "'")
    return source if shlex.quote(source) == quoted else None


def _helper_request(command: str, environment: dict[str, str] | None, workspace: Path) -> tuple[list, dict] | None:
    """The command line (python3 as bash or the wrapper passes it on, -I -c SOURCE) where `command` is `python3 -I
    -c SOURCE` and its python3 is the sandbox's interpreter or its wrapper (which execs it unchanged), and the
    environment the interpreter would get from bash (and the wrapper): PWD (the inherited one where it names the
    working directory), OLDPWD where it names a folder, SHLVL as it was (bash counts itself, then uncounts the
    exec of its last command) and, for the interpreter bash starts itself, `_`."""
    if not command.startswith("python3 -I -c '") or (source := _quoted_source(command)) is None:
        return None
    given = environment if environment is not None else _host_environment()
    python = shutil.which("python3", path=given.get("PATH", ""))
    if python is not None and _is_wrapper(python) and "PYTHONPYCACHEPREFIX" not in given:  # else it fills a prefix
        argv0, added = str(sandbox_python()), {}
    elif python == str(sandbox_python()):
        argv0, added = "python3", {"_": python}
    else:
        return None
    level = given.get("SHLVL", "0")
    if not level.isdigit():
        return None
    pwd = given.get("PWD", "")
    try:
        inherited = os.path.isabs(pwd) and os.path.samefile(pwd, workspace)
    except OSError:
        inherited = False
    passed = {name: value for name, value in given.items() if name != "OLDPWD" or os.path.isdir(value)}
    pwd = pwd if inherited else os.path.realpath(workspace)
    return [argv0, "-I", "-c", source], {**passed, "PWD": pwd, "SHLVL": level, **added}


def _receive(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _communicate(stdin: int, output: int, data: bytes, deadline: float | None) -> tuple[bytes, bool]:
    """`data` written to `stdin` (then closed) while `output` is read to its end: what was read, and whether the
    deadline came first."""
    chunks: list[bytes] = []
    os.set_blocking(stdin, False)
    with selectors.DefaultSelector() as selector:
        selector.register(output, selectors.EVENT_READ)
        if data:
            selector.register(stdin, selectors.EVENT_WRITE)
        else:
            os.close(stdin)
        while output in selector.get_map() or stdin in selector.get_map():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                if stdin in selector.get_map():
                    os.close(stdin)
                return b"".join(chunks), True
            for key, _ in selector.select(remaining):
                if key.fd == output:
                    chunk = os.read(output, 1 << 16)
                    if chunk:
                        chunks.append(chunk)
                    else:
                        selector.unregister(output)
                    continue
                try:
                    data = data[os.write(stdin, data[: 1 << 16]) :]
                except BlockingIOError:
                    continue
                except BrokenPipeError:
                    data = b""
                if not data:
                    selector.unregister(stdin)
                    os.close(stdin)
    return b"".join(chunks), False


def _drain(output: int) -> bytes:
    chunks = []
    while chunk := os.read(output, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


# Where the interpreter's own bytecode for a fresh PYTHONPYCACHEPREFIX is kept: the tests' session sets it
# (tests/conftest.py), so that the CLI's child processes share one copy.
BYTECODE_ENV = "REFACTOR_AGENT_TESTS_BYTECODE"
_WRAPPER = """#!/bin/bash
# python3 of a local sandbox. `python3 -m pytest ...` starts in the session's pytest zygote, with pytest imported
# (support/pytest_zygote.py): its run has the interpreter's modules imported, and its fresh PYTHONPYCACHEPREFIX
# starts empty (whatever else it imports it compiles there). Where the zygote declines, its client runs this again
# with {declined} first, and the interpreter starts here.
if [[ "${{1:-}}" == {declined} ]]; then
    shift
elif [[ "${{1:-}}" == -m && "${{2:-}}" == pytest && -S {zygote} ]]; then
    exec {client} {zygote} "$0" {declined} {python} "$@"
fi
# An interpreter's fresh PYTHONPYCACHEPREFIX starts with its own bytecode, as hard links (Python replaces a .pyc it
# writes, never writes into one; copying the 8 MB took more CPU than the suite's tests). On another file system, a
# copy. Not for the zygote's runs: linking and then removing them (the gate empties its prefix before each run) was
# half of such a run's time.
prefix="${{PYTHONPYCACHEPREFIX:-}}"
if [[ -n "$prefix" && ! -e "$prefix" ]]; then
    mkdir -p "$prefix"
    cp -al {template}/. "$prefix" 2>/dev/null ||
        {{ rm -rf "$prefix" && mkdir -p "$prefix" && cp -a {template}/. "$prefix"; }}
fi
exec {python} "$@"
"""
# The wrapper's first argument when the zygote's client runs it again, the zygote having declined the run.
DECLINED = "--local-sandbox-zygote-declined"
# The session's pytest zygote: "PID:SOCKET", the session's process and where the zygote listens (tests/conftest.py
# sets it; the CLI's child processes inherit it).
ZYGOTE_ENV = "REFACTOR_AGENT_TESTS_ZYGOTE"
_SUPPORT = Path(__file__).parent
_CLIENT = _SUPPORT / "zygote_client.py"
_C_CLIENT = _SUPPORT / "zygote_client.c"
_LOCALE = {"LANG": "C.UTF-8"}  # the sandbox's, and the zygote's: a run in another locale is declined
_started: list[subprocess.Popen] = []  # kept: never collected as a child still running
_starting = threading.Lock()


def bytecode_path() -> Path:
    return Path(tempfile.gettempdir()) / f"local-sandbox-bytecode-{os.getuid()}"


def bytecode_template() -> Path:
    """The interpreter's bytecode of what a pytest run imports (pytest, its plugins, the standard library), made
    once by a pytest run into an empty prefix; only the interpreter's files, so nothing there can be stale for a
    worktree's module (Python checks each against its source anyway)."""
    template = Path(
        os.environ.get(BYTECODE_ENV) or Path(tempfile.gettempdir()) / f"local-sandbox-bytecode-{os.getuid()}"
    )
    if template.is_dir():
        return template
    with tempfile.TemporaryDirectory(dir=template.parent) as scratch:
        (Path(scratch) / "tests").mkdir()
        (Path(scratch) / "tests" / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
        prefix = Path(scratch) / "bytecode"
        inherited = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
        environment = {**inherited, "PYTHONPYCACHEPREFIX": str(prefix), "PYTHONNOUSERSITE": "1"}
        junit = f"--junitxml={scratch}/junit.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", junit, "tests"]
        subprocess.run(command, cwd=scratch, env=environment, capture_output=True, check=True)
        with contextlib.suppress(OSError):  # another process made it first: theirs is as good
            prefix.rename(template)
    return template


def sandbox_python() -> Path:
    """An interpreter with this one's libraries (pytest, rope) and not the editable install of refactor-agent, as
    the image has none: a virtual environment whose .pth names this interpreter's site-packages (a path line: their
    own .pth files, the editable install's finder among them, are not run). The finder's import was an eighth of
    the start-up of each Python process of a sandbox. Made once per machine, like the bytecode template."""
    libraries = sorted(path for path in sys.path if path.endswith("site-packages"))
    key = hashlib.sha256("\n".join([os.path.realpath(sys.executable), *libraries]).encode()).hexdigest()[:12]
    home = bytecode_template().parent / f"local-sandbox-python-{os.getuid()}-{key}"  # not a test's tempdir
    python = home / "bin" / "python3"
    if python.exists():
        return python
    with tempfile.TemporaryDirectory(dir=home.parent) as scratch:
        made = Path(scratch) / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(made)], check=True, capture_output=True)
        (site,) = made.glob("lib/python*/site-packages")
        (site / "tests-libraries.pth").write_text("".join(f"{path}\n" for path in libraries))
        with contextlib.suppress(OSError):  # another process made it first: theirs is as good
            made.rename(home)
    return python


def python_zygote_client() -> str:
    return f"{sandbox_python()} -I -S {_CLIENT}"


@functools.cache
def zygote_client() -> str:
    """The command of the pytest zygote's client: support/zygote_client.c compiled, once per machine (as the bytecode
    template), where a C compiler is there; else the interpreter running zygote_client.py, whose start was a third
    of what a small suite's run cost past the fork."""
    source = _C_CLIENT.read_bytes()
    compiler = shutil.which("cc")
    fallback = python_zygote_client()
    if compiler is None:
        return fallback
    key = hashlib.sha256(source + os.path.realpath(compiler).encode()).hexdigest()[:12]
    binary = bytecode_template().parent / f"local-sandbox-client-{os.getuid()}-{key}"  # not a test's tempdir
    if not binary.exists():
        with tempfile.TemporaryDirectory(dir=binary.parent) as scratch:
            made = Path(scratch) / "zygote_client"
            compiled = subprocess.run([compiler, "-O2", "-o", str(made), str(_C_CLIENT)], capture_output=True)
            if compiled.returncode != 0:
                return fallback
            with contextlib.suppress(OSError):  # another process made it first: theirs is as good
                made.rename(binary)
    return str(binary)


def _host_environment() -> dict[str, str]:
    folders = [str(sandbox_python().parent), os.environ.get("PATH", "/usr/bin:/bin")]
    return {**os.environ, "PATH": os.pathsep.join(folders)}


def _zygote_address() -> tuple[int, Path] | None:
    value = os.environ.get(ZYGOTE_ENV)
    if not value:
        return None
    owner, _, path = value.partition(":")
    return int(owner), Path(path)


def _helpers_path(path: Path) -> Path:
    return path.with_name(f"{path.stem}-helpers{path.suffix}")


def _start_zygote(path: Path, interpreter: list[str], script: str, *arguments: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(64)
        home = path.parent
        environment = {**_LOCALE, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
        environment.update(TMPDIR=str(home), PYTHONNOUSERSITE="1", PYTHONPYCACHEPREFIX=str(bytecode_template()))
        command = [*interpreter, str(_SUPPORT / script), str(os.getpid()), str(listener.fileno()), *arguments]
        log = (home / "zygote.log").open("ab")
        with log:
            _started.append(
                subprocess.Popen(
                    command,
                    cwd="/",
                    env=environment,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    pass_fds=(listener.fileno(),),
                    start_new_session=True,
                )
            )


def zygote_socket() -> Path | None:
    """Where the session's pytest zygote listens; None outside a test session. The session's process starts it and
    the helper zygote, at its first local sandbox or CLI process (support/cli_runs.py): its children, whose CPU
    time counts as the session's (and their runs' with it)."""
    address = _zygote_address()
    if address is None:
        return None
    owner, path = address
    with _starting:
        if owner != os.getpid() or _started:
            return path  # if it ended, its clients exec the interpreter
        _start_zygote(path, [str(sandbox_python())], "pytest_zygote.py")
        # The file and symbol tools' helpers: their folder, then the folders the symbol tools' helper puts first.
        helpers, *libraries = sandbox_mounts()
        folders = sorted({str(helpers)} | {str(library.parent) for library in libraries})
        _start_zygote(_helpers_path(path), [str(sandbox_python()), "-I"], "helper_zygote.py", str(helpers), *folders)
    return path


def helper_zygote_socket() -> Path | None:
    """Where the session's helper zygote listens (support/helper_zygote.py); None outside a test session."""
    path = zygote_socket()
    return None if path is None else _helpers_path(path)


def stop_zygote() -> None:
    """The session's zygotes end, and the runs they forked with them (the session's end)."""
    address = _zygote_address()
    if address is None or address[0] != os.getpid():  # the session's process stops them
        return
    for path in (address[1], _helpers_path(address[1])):
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(str(path))
            connection.sendall(bytes(8))  # an empty request
            connection.recv(1)  # its end
    for process in _started:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def python_folder(home: Path) -> Path:
    """A folder with `python3` and `python` for the sandbox's commands (see _WRAPPER)."""
    folder = home / "bin"
    folder.mkdir()
    zygote = zygote_socket() or "/nonexistent"  # outside a test session: the interpreter, always
    text = _WRAPPER.format(
        template=bytecode_template(), python=sandbox_python(), client=zygote_client(), zygote=zygote, declined=DECLINED
    )
    for name in ("python3", "python"):
        wrapper = folder / name
        wrapper.write_text(text)
        wrapper.chmod(0o755)
    return folder


def sandbox_environment(home: Path) -> dict[str, str]:
    """A command's environment: nothing of the test process (no PYTHONPATH), a HOME and TMPDIR of its own, pytest
    without the plugins the image does not have."""
    folders = [str(python_folder(home)), str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")]
    # The image's pytest (Debian's) has no plugins; this interpreter's has the tests' own (pytest-timeout, anyio's,
    # platformdirs'), whose loading is 40 % of a small suite's start-up, at every gate run.
    # GIT_OPTIONAL_LOCKS=0 as the container's (sandbox/container.py): there the index is read-only, and a `git status`
    # (the symbols tool's) writing it here would make the product's git see an index the model's side rewrote.
    environment = {
        "HOME": str(home), "TMPDIR": str(home), **_LOCALE, "GIT_CONFIG_NOSYSTEM": "1", "GIT_OPTIONAL_LOCKS": "0",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }  # fmt: skip
    return {**environment, "PATH": os.pathsep.join(folders)}


class LocalSandboxes:
    """The Sandboxes protocol (agent/run/sandboxes.py) on this machine; `root` holds each sandbox's private folder
    (None: the temporary directory)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root
        self.opened: list[LocalExecutor] = []

    def preflight(self, images: Iterable[str]) -> None:
        pass

    def sweep(self) -> int:
        return 0

    def environment(
        self,
        repo: git.Repo,
        config: RunConfig,
        *,
        log_path: Path,
        progress: Callable[[str], None],
        deadline: float | None,
        revision: str = "HEAD",
    ) -> EnvironmentRecord:
        """The image as it is (this machine is the environment), with the test command the real stage would find:
        the gate's own detection, on the repository's files."""
        chosen = choose_test_command(config.test_cmd, Path(str(repo.working_tree_dir)))
        return EnvironmentRecord(
            source="local",
            description="this machine's Python (tests without Docker)",
            image=config.image,
            status="as_is",
            test_command=chosen.command if chosen is not None else None,
            test_command_source=chosen.source if chosen is not None else "none found",
        )

    def identity(self, image: str) -> str:
        return image

    @contextlib.contextmanager
    def open(
        self, image: str, workspace: Path, *, run_id: str, limits: SandboxLimits, read_only_paths: Sequence[Path]
    ) -> Iterator[LocalExecutor]:
        with tempfile.TemporaryDirectory(prefix=f"local-sandbox-{run_id}-", dir=self.root) as private:
            home = Path(private)
            executor = LocalExecutor(workspace, sandbox_environment(home), report_dir=home / "report")
            self.opened.append(executor)
            try:
                yield executor
            finally:
                executor.close()

    def remove_run(self, run_id: str) -> None:
        for executor in self.opened:
            executor.close()

    def prune_images(self, keep: int, *, repositories: set[str], dry_run: bool) -> tuple[list[str], dict[str, str]]:
        """This machine is the environment: it has no environment images."""
        return [], {}
