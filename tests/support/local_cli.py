"""`python -m support.local_cli run|resume|night ...`: the real command line, its one difference that tasks run in
sandboxes on this machine (support/local_sandbox.py), for the tests that run the CLI as a process of its own
(signals, kill -9, resume) and do not test Docker.

`start_local_cli` starts that command line as a process forked from a server that imported it once
(multiprocessing's forkserver, the CLI preloaded): a process of its own all the same, for kill -9, without the
imports each start-up costs (a second of CPU, most of what a run killed early spends). Its standard streams are
discarded, or descriptors given (a pipe, a pseudo-terminal) that the forkserver hands to it, as a Popen would;
`run_local_cli` runs one to its end and returns its output."""

from __future__ import annotations

import locale
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.reduction
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import agent.run.command
from agent.__main__ import main as agent_main

from support.cli_runs import LOCAL_AGENT, cli_environment, code_under_test, default_signals
from support.local_sandbox import LocalSandboxes

# What `run` and `resume` import, once, in the server the processes are forked from; support.cli_preload last.
_PRELOADED = ["support.local_cli", "agent.cli", "agent.run.command", "agent.record.live", "support.cli_preload"]
_FORKSERVER = multiprocessing.get_context("forkserver")
_SESSION = os.getpid()  # the session's process, which starts the server
_starting = threading.Lock()
_started: list[bool] = []


def main() -> None:
    agent.run.command.docker_sandboxes = LocalSandboxes  # the run's one seam for its sandboxes
    sys.argv[0] = "refactor-agent"
    agent_main()


class _Descriptor:
    """A descriptor of the starting process, pickled as one the forked process inherits (multiprocessing sends it
    to the forkserver with the process, as it does a Connection's)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[object, tuple[object]]:
        return _inherited, (multiprocessing.reduction.DupFd(self.fd),)


def _inherited(duplicate: object) -> int:
    return duplicate.detach()  # type: ignore[attr-defined] - multiprocessing's DupFd


def _forked_main(
    arguments: list[str], environment: dict[str, str], cwd: str, streams: tuple[int, int, int] | None
) -> None:
    """In the forked process: what a start of `python -m support.local_cli` by start_cli would have, then main."""
    os.environ.clear()
    os.environ.update(environment)
    tempfile.tempdir = None  # from TMPDIR, now the test's scratch
    os.chdir(cwd)
    if streams is None:
        discarded = os.open(os.devnull, os.O_WRONLY)
        os.dup2(discarded, 1)
        os.dup2(discarded, 2)
    else:
        for standard, fd in enumerate(streams):
            os.dup2(fd, standard)
        for fd in set(streams):
            os.close(fd)
    default_signals()
    sys.argv = ["refactor-agent", *arguments]
    main()


class ForkedCli:
    """The forked process, with what the tests use of a Popen."""

    def __init__(self, process: multiprocessing.process.BaseProcess, command: list[str]) -> None:
        self._process = process
        self._command = command

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def kill(self) -> None:
        self._process.kill()

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self._command, timeout or 0)
        return self._process.exitcode


def start_forkserver() -> None:
    """The server, started once with PYTHONPATH naming the tests' folder: multiprocessing hands it this process's
    sys.path, which Python 3.11's server does not apply, and without it support.* failed to import there (an
    ImportError it passes over: nothing of support/ preloaded, each forked CLI importing it again). It returns
    before the server's imports are done (tests/conftest.py starts it once the session's tests are collected: its
    second of imports runs while the tests before the first killed run do)."""
    with _starting:
        if _started:
            return
        _FORKSERVER.set_forkserver_preload(_PRELOADED)
        inherited = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join([code_under_test(), *([inherited] if inherited else [])])
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            if inherited is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = inherited
        _started.append(True)


def _as_the_session() -> None:
    """In a process forked from the session's (support/background.py), the session's server, as the session reaches
    it (its address and descriptors are inherited): multiprocessing would wait for it as for a child of its own,
    which it is not here, and start a server of its own instead, a second of imports again."""
    if _started:
        multiprocessing.forkserver._forkserver.ensure_running = lambda: None  # type: ignore[attr-defined]


def start_local_cli(
    command: list[str],
    scratch: Path,
    streams: tuple[int, int, int] | None = None,
    environment: dict[str, str] | None = None,
) -> ForkedCli:
    """A LOCAL_AGENT command line as a process of its own (start_cli's environment, updated with `environment`,
    and cwd), its stdin, stdout and stderr the descriptors `streams` (the caller's to close), or its output
    discarded."""
    assert tuple(command[: len(LOCAL_AGENT)]) == LOCAL_AGENT
    if os.getpid() != _SESSION:
        _as_the_session()
    start_forkserver()
    environment = {**cli_environment(scratch), **(environment or {})}
    arguments = command[len(LOCAL_AGENT) :]
    handed = tuple(_Descriptor(fd) for fd in streams) if streams is not None else None
    process = _FORKSERVER.Process(target=_forked_main, args=(arguments, environment, str(scratch.parent), handed))
    process.start()
    return ForkedCli(process, command)


def run_local_cli(command: list[str], scratch: Path, timeout_s: float = 120) -> tuple[str, str]:
    """A LOCAL_AGENT command line run to its end as start_local_cli starts it, its stdin empty: its stdout and
    stderr, as subprocess.run(capture_output=True, text=True) gives them."""
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    stdin = os.open(os.devnull, os.O_RDONLY)
    try:
        process = start_local_cli(command, scratch, (stdin, out_write, err_write))
    finally:
        for fd in (stdin, out_write, err_write):
            os.close(fd)
    with open(out_read, "rb") as out, open(err_read, "rb") as err:
        errors: list[bytes] = []
        reader = threading.Thread(target=lambda: errors.append(err.read()))  # both drained: neither pipe fills up
        reader.start()
        output = out.read()
        reader.join()
    process.wait(timeout_s)
    return _text(output), _text(errors[0])


def _text(data: bytes) -> str:
    """As text=True decodes: the locale's encoding, universal newlines."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


if __name__ == "__main__":
    main()
