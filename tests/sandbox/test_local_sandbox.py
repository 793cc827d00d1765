"""The local sandbox of the tests without Docker (support/local_sandbox.py): its `python3 -m pytest` starts in the
session's pytest zygote, and what the gate reads of a run is what the interpreter itself would have given."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agent.gate.suite import run_suite
from sandbox import ExecResult
from tools.files import _helper_command as files_helper_command
from tools.symbols import _helper_command as symbols_helper_command

from support import local_sandbox
from support.cli_runs import processes_under, wait_for
from support.local_sandbox import ZYGOTE_ENV, LocalExecutor, _helper_request, sandbox_environment
from support.repos import make_repo


# What a run starts with, as a test of the suite writes it down (to the file DUMP names).
def _state_probe(zygote: str, more: str) -> str:
    """The lines that gather what a process started with, into `state` (`forked`: the zygote named is its parent),
    with `more` of the dict's entries; the same in both zygotes' probes."""
    return f"""with open(f"/proc/{{os.getppid()}}/cmdline", "rb") as parent:
    forked = b"{zygote}" in parent.read()
streams = [
    (s.encoding, s.errors, s.line_buffering, s.buffer.raw.name, s.mode, type(s.buffer).__name__, s.fileno())
    for s in (sys.__stdin__, sys.__stdout__, sys.__stderr__)
]
state = {{
    "forked": forked, "path": sys.path, "argv": sys.argv, "orig_argv": sys.orig_argv, "flags": str(sys.flags),
    "pycache_prefix": sys.pycache_prefix, "dont_write_bytecode": sys.dont_write_bytecode, "cwd": os.getcwd(),
    "environment": dict(os.environ), "umask": os.umask(0o22), "streams": streams, "stdin": sys.stdin.read(),
    "main": sorted(vars(__main__)), "executable": sys.executable, "files": resource.getrlimit(resource.RLIMIT_NOFILE),
    "descriptors": sorted(os.listdir("/proc/self/fd")), "session": os.getsid(0) == os.getpid(),
{textwrap.indent(more.strip(), "    ")}
}}
"""


_PYTEST_STATE = """
"cached": pytest.__cached__, "user_site": site.USER_SITE,
"ignored": [n for n in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP) if signal.getsignal(n) == signal.SIG_IGN],
"""
STATE_TEST = (
    "import json, os, signal, site, sys, resource, __main__, pytest\n\ndef test_state():\n"
    + textwrap.indent(_state_probe("pytest_zygote", _PYTEST_STATE), "    ")
    + '    with open(os.environ["DUMP"], "w") as dump:\n        json.dump(state, dump)\n'
)
# The first line of the tests below: the run is the zygote's child (otherwise they would test the interpreter).
FORKED = "import os\nassert b'pytest_zygote' in open(f'/proc/{os.getppid()}/cmdline', 'rb').read()\n"
# As the gate runs a suite: no user site-packages (a run without is declined: the zygote's flags have it).
PYTHON = "export PYTHONNOUSERSITE=1 && python3"
# PYTHONPATH with a relative entry, an empty one (the working directory) and one twice.
SETUP = "export PYTHONPATH=.:src::./src/ && ulimit -n 512 && umask 027 && trap '' QUIT && "
RUN = 'echo typed | DUMP="$HOME/state.json" python3 -m pytest -q -s -p no:cacheprovider tests/test_state.py 3</dev/null'


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo")
    (repo / "tests" / "test_state.py").write_text(STATE_TEST)
    return repo


def _executor(repo: Path, home: Path) -> LocalExecutor:
    home.mkdir()
    return LocalExecutor(repo, sandbox_environment(home), report_dir=home / "report")


@pytest.fixture
def sandbox(repo: Path, tmp_path: Path) -> Iterator[LocalExecutor]:
    executor = _executor(repo, tmp_path / "sandbox")
    yield executor
    executor.close()


def _state(executor: LocalExecutor, home: Path) -> dict:
    result = run_suite(executor, SETUP + RUN, timeout_s=120)
    assert result.outcomes == {"tests/test_state.py::test_state": "passed"}, result.output_tail
    return json.loads((home / "state.json").read_text().replace(str(home), "HOME"))


@pytest.fixture(params=["c", "python"])
def client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The pytest zygote's client the sandboxes made next run: the compiled one, or the interpreter's (where no C
    compiler is there)."""
    if request.param == "python":
        monkeypatch.setattr(local_sandbox, "zygote_client", local_sandbox.python_zygote_client)
    compiled = not local_sandbox.zygote_client().endswith("zygote_client.py")
    assert compiled == (request.param == "c" and shutil.which("cc") is not None)
    return request.param


def test_a_run_forked_by_the_zygote_starts_as_the_interpreter_would_have(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    forked = _state(_executor(repo, tmp_path / "forked"), tmp_path / "forked")
    monkeypatch.delenv(ZYGOTE_ENV)  # this sandbox's python3 finds no zygote: it execs the interpreter
    started = _state(_executor(repo, tmp_path / "started"), tmp_path / "started")
    assert forked.pop("forked") and not started.pop("forked")
    # Bash exports `_`, the last command's path: the wrapper's, or the interpreter's it execs.
    forked["environment"].pop("_", None)
    started["environment"].pop("_", None)
    assert forked.pop("session") and not started.pop("session"), "a forked run is a process group of its own"
    assert forked == started
    # pytest's rootdir first (prepend import mode), then the working directory, PYTHONPATH's, the interpreter's.
    assert started["path"][:4] == [str(repo / "tests"), str(repo), str(repo), str(repo / "src")]
    assert started["stdin"] == "typed\n" and started["umask"] == 0o027 and started["files"][0] == 512


# A failure two frames deep: its report shows the source of both (read with the caches the zygote warmed) and
# escapes its text into the JUnit report.
FAILS = """import os, pathlib

forked = b"pytest_zygote" in open(f"/proc/{os.getppid()}/cmdline", "rb").read()
pathlib.Path(os.environ["HOME"], "forked").write_text(str(forked))


def doubled(value):
    assert value * 2 == 5, "not \u00e9ven"
    return value * 2


def test_fails():
    assert doubled(2) == 4
"""


def _failure(executor: LocalExecutor, home: Path) -> tuple[bool, str, str]:
    command = f"{PYTHON} -m pytest -q -p no:cacheprovider --junitxml=$HOME/junit.xml tests/test_fails.py"
    result = executor.execute(command, timeout_s=120)
    assert result.exit_code == 1, result.output
    junit = re.sub(r'(time|timestamp)="[^"]*"', "", (home / "junit.xml").read_text())
    return (home / "forked").read_text() == "True", re.sub(r" in [0-9.]+s", "", result.output), junit


def test_a_failure_forked_by_the_zygote_is_reported_as_the_interpreter_would_have(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (repo / "tests" / "test_fails.py").write_text(FAILS)
    forked = _failure(_executor(repo, tmp_path / "forked"), tmp_path / "forked")
    monkeypatch.delenv(ZYGOTE_ENV)
    started = _failure(_executor(repo, tmp_path / "started"), tmp_path / "started")
    assert forked[0] and not started[0]
    assert forked[1:] == started[1:]
    assert "    assert doubled(2) == 4\n" in started[1]
    assert '>       assert value * 2 == 5, "not \u00e9ven"' in started[1]
    assert 'message="AssertionError: not \u00e9ven' in started[2]


def test_a_suite_that_hangs_ends_when_its_command_is_killed_with_what_it_started(
    repo: Path, sandbox: LocalExecutor
) -> None:
    """At a timeout the executor kills the command's process group (as closing the sandbox does, here once the
    suite hangs): the forked run is in a group of its own, which the zygote kills when the client dies."""
    (repo / "tests" / "test_hangs.py").write_text(
        f"{FORKED}import pathlib, subprocess, time\n\n"
        "def test_hangs():\n    subprocess.Popen(['sleep', '300'])\n"
        "    pathlib.Path('hanging').touch()\n    time.sleep(300)\n"
    )
    with ThreadPoolExecutor(max_workers=1) as threads:
        running = threads.submit(run_suite, sandbox, "python3 -m pytest -q tests/test_hangs.py", timeout_s=600)
        wait_for((repo / "hanging").exists, "the suite to hang")
        sandbox.close()
        run = running.result(timeout=60)
    assert not run.ran and run.exit_code == -signal.SIGKILL
    wait_for(lambda: not processes_under(repo), "the run and its sleep to be killed", timeout_s=30)


def test_what_a_run_left_running_ends_when_the_sandbox_closes(repo: Path, sandbox: LocalExecutor) -> None:
    (repo / "tests" / "test_leaves.py").write_text(
        f"{FORKED}import subprocess\n\n"
        "def test_leaves():\n    subprocess.Popen(['sleep', '300'], stdout=subprocess.DEVNULL)\n"
    )
    result = sandbox.execute(f"{PYTHON} -m pytest -q -p no:cacheprovider tests/test_leaves.py", timeout_s=120)
    assert result.exit_code == 0 and not result.timed_out
    assert processes_under(repo, "sleep 300"), "it outlives the run, as it would outlive the interpreter"
    sandbox.close()
    wait_for(lambda: not processes_under(repo, "sleep 300"), "what the run left to be killed", timeout_s=30)


@pytest.mark.parametrize(
    ("test", "status"),
    [("assert False", 1), ("pass", 0), ("os.kill(os.getpid(), signal.SIGTERM)", 128 + signal.SIGTERM)],
)
def test_the_shell_sees_the_run_end_as_it_ended(
    repo: Path, tmp_path: Path, client: str, test: str, status: int
) -> None:
    (repo / "tests" / "test_ends.py").write_text(f"{FORKED}import signal\n\ndef test_ends():\n    {test}\n")
    result = _executor(repo, tmp_path / "sandbox").execute(
        f"{PYTHON} -m pytest -q -p no:cacheprovider tests/test_ends.py; echo status $?"
    )
    assert result.output.splitlines()[-1] == f"status {status}"


# What a tool's helper starts with (`python3 -I -c`), as it writes it down on its stdout.
_HELPER_STATE = """
"name": __name__, "file": "__file__" in vars(),
"ignored": [n for n in signal.valid_signals() if signal.getsignal(n) == signal.SIG_IGN],
"blocked": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
"group": os.getpgid(0) == os.getpid(), "stderr": os.path.sameopenfile(1, 2),
"""
PROBE = (
    "import json, os, resource, signal, sys, __main__\n"
    + _state_probe("helper_zygote", _HELPER_STATE)
    + "print(json.dumps(state))\n"
)


def _helper(executor: LocalExecutor, source: str, stdin: bytes = b"", timeout_s: float = 60) -> ExecResult:
    return executor.execute(f"python3 -I -c {shlex.quote(source)}", stdin=stdin, timeout_s=timeout_s)


def _forked_and_started(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, stdin: bytes = b"", host: bool = False
) -> tuple[ExecResult, ExecResult]:
    """The helper forked, then started by bash: in a sandbox's environment, or (`host`) in this process's."""

    def executor(name: str) -> LocalExecutor:
        return LocalExecutor(repo) if host else _executor(repo, tmp_path / name)

    forked = _helper(executor("forked"), source, stdin)
    with monkeypatch.context() as context:
        context.delenv(ZYGOTE_ENV)  # no helper zygote: bash runs the command (and the wrapper execs the interpreter)
        started = _helper(executor("started"), source, stdin)
    return forked, started


@pytest.mark.parametrize("host", [False, True], ids=["sandbox", "host"])
def test_a_helper_forked_by_the_helper_zygote_starts_as_the_interpreter_would_have(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: bool
) -> None:
    request = json.dumps({"op": "view_file", "path": "x" * 100_000}).encode()  # more than a pipe holds
    for name in ("LC_ALL", "LC_CTYPE"):  # this process's locale as the zygote's (another one is declined)
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")
    forked, started = _forked_and_started(repo, tmp_path, monkeypatch, PROBE, request, host)
    assert forked.exit_code == started.exit_code == 0, (forked.output, started.output)
    forked_state = json.loads(forked.output.replace(str(tmp_path / "forked"), "HOME"))
    started_state = json.loads(started.output.replace(str(tmp_path / "started"), "HOME"))
    assert forked_state.pop("forked") and not started_state.pop("forked")
    assert forked_state["environment"].pop(ZYGOTE_ENV, None) == (os.environ[ZYGOTE_ENV] if host else None)
    assert forked_state == started_state
    assert started_state["stdin"] == request.decode() and started_state["argv"] == ["-c"]
    assert started_state["session"] and started_state["stderr"] and started_state["cwd"] == str(repo)
    assert started_state["environment"]["PWD"] == str(repo) and started_state["descriptors"] == ["0", "1", "2", "3"]


@pytest.mark.parametrize(
    "source",
    [
        "import sys; print('out'); sys.exit(3)",
        "def broken():\n    raise ValueError('no')\n\nprint('before', flush=True)\nbroken()\n",
        "x = (",
        "import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
        "raise KeyboardInterrupt",
    ],
)
def test_a_helper_forked_by_the_helper_zygote_ends_as_the_interpreter_would_have(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    forked, started = _forked_and_started(repo, tmp_path, monkeypatch, source)
    assert (forked.exit_code, forked.output) == (started.exit_code, started.output)
    assert started.exit_code != 0 and not started.timed_out


def test_a_helper_that_hangs_is_killed_at_its_timeout(repo: Path, sandbox: LocalExecutor) -> None:
    hangs = "import time\nprint('hanging', flush=True)\ntime.sleep(300)\n"
    assert _helper(sandbox, "pass").exit_code == 0  # the zygote started: the half second is the helper's alone
    result = _helper(sandbox, f"{FORKED.replace('pytest_zygote', 'helper_zygote')}{hangs}", timeout_s=0.5)
    assert result.timed_out and result.exit_code is None and result.output == "hanging\n"
    wait_for(lambda: not processes_under(repo), "the helper to be killed", timeout_s=30)


def test_the_tools_helpers_are_what_the_helper_zygote_forks(repo: Path, sandbox: LocalExecutor) -> None:
    """Their commands as the tools write them: one quoted word after `python3 -I -c`, from the sandbox's python3."""
    for command in (files_helper_command(), symbols_helper_command()):
        for environment in (sandbox.environment, None):
            helper = _helper_request(command, environment, repo)
            assert helper is not None and helper[0][1:] == ["-I", "-c", shlex.split(command)[3]]
    assert _helper_request("python3 -I -c 'pass' > out", sandbox.environment, repo) is None
    assert _helper_request("python3 -I -c 'pass'", {"PATH": "/usr/bin:/bin"}, repo) is None
