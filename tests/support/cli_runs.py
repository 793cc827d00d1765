"""The CLI as a process of its own (for signals and kill -9) and what a run leaves: shared by the e2e tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from agent.protocol.events import parse_event
from agent.record.journal import run_directories
from sandbox import LABEL, docker_client

from support.local_sandbox import zygote_socket
from support.scripted_server import ScriptedServer


def read_run(runs_dir: Path) -> tuple[Path, dict, list[dict]]:
    (run_dir,) = run_directories(runs_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    lines = (run_dir / "transcript.jsonl").read_text().splitlines()
    # Every line is one typed event (what resume and review read back), stamped with its task past run_start.
    events = [parse_event(line) for line in lines]
    run_level = ("run_start", "run_end", "environment", "environment_progress")
    assert all(event.task is not None for event in events if event.type not in run_level)
    return run_dir, summary, [json.loads(line) for line in lines]


# The CLI as a user runs it, and the same CLI with its tasks' sandboxes on this machine (support/local_cli.py).
AGENT = (sys.executable, "-m", "agent")
LOCAL_AGENT = (sys.executable, "-m", "support.local_cli")


def cli_command(
    repo: Path, server: ScriptedServer, runs_dir: Path, *tasks: str, cli: tuple[str, ...] = AGENT
) -> list[str]:
    task_options = [option for task in tasks for option in ("--task", task)]
    return [
        *cli, "run", str(repo), *task_options, "--server", server.url, "--runs-dir", str(runs_dir),
    ]  # fmt: skip


def default_signals() -> None:
    """A test runner started in the background ignores SIGINT, under nohup SIGHUP, and its children inherit that
    (the CLI rightly keeps a signal it was started ignoring): the run under test must see them."""
    for stop in (signal.SIGINT, signal.SIGHUP):
        signal.signal(stop, signal.SIG_DFL)


def code_under_test() -> str:
    """A PYTHONPATH naming the code under test: this source tree and its tests (for support.*)."""
    root = Path(__file__).resolve().parents[2]
    return os.pathsep.join([str(root), str(root / "tests")])


def cli_environment(scratch: Path) -> dict[str, str]:
    """The CLI's environment: its scratch directories under `scratch` (TMPDIR); PYTHONPATH names the code under
    test, which the CLI's working directory (scratch's parent) does not."""
    scratch.mkdir(exist_ok=True)
    zygote_socket()  # for the CLI's local sandboxes, which find it through the environment
    return {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": code_under_test()}


def start_cli(command: list[str], scratch: Path, **popen: object) -> subprocess.Popen:
    """The CLI in a process of its own, for signals; its scratch directories go under `scratch` (TMPDIR). Its cwd
    is outside any repository: a git call that lost its worktree must not find the one the tests run from."""
    environment = cli_environment(scratch)
    return subprocess.Popen(command, cwd=scratch.parent, env=environment, preexec_fn=default_signals, **popen)


def wait_for(condition: Callable[[], object] | threading.Event, what: str, timeout_s: float = 300) -> None:
    """Until `condition` holds. An event is waited on; a callable is asked again after a tenth of the time waited so
    far (10 ms to 0.2 s) and at least twice as long as it took to answer: a wait ends about when the condition comes
    true (at a fixed 0.2 s, 0.1 s late on average, at each kill of the killed-run tests), and a costly condition (a
    scan of /proc) takes at most a third of a core from what it waits for."""
    if isinstance(condition, threading.Event):
        assert condition.wait(timeout_s), f"timed out waiting for {what}"
        return
    started = time.monotonic()
    while True:
        asked = time.monotonic()
        if condition():
            return
        now = time.monotonic()
        assert now - started < timeout_s, f"timed out waiting for {what}"
        time.sleep(min(0.2, max(0.01, (now - started) / 10, 2 * (now - asked))))


def processes_under(directory: Path, text: str = "") -> list[int]:
    """This machine's processes working in `directory` (or below) whose command line holds `text`: what a local
    sandbox's commands left running."""
    found = []
    under = directory.resolve()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:  # the command line first: most processes end the look there (a scan is asked for again and again)
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if text in command and (entry / "cwd").resolve().is_relative_to(under):
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def kill_processes_under(directory: Path) -> None:
    for pid in processes_under(directory):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def run_containers(run_id: str) -> list:
    return docker_client().containers.list(all=True, filters={"label": f"{LABEL}={run_id}"})


def worktrees(repo: Path) -> list[str]:
    listing = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=repo, capture_output=True, text=True)
    return [line.split(" ", 1)[1] for line in listing.stdout.splitlines() if line.startswith("worktree ")]


def transcript_of(run_dir: Path) -> list[dict]:
    path = run_dir / "transcript.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
