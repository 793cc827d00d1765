"""A run killed with SIGKILL, then resumed: as the resume tests run it (sandboxes on this machine, support/local_cli.py)
and as their one twin in the Docker tier does (the real CLI and sandbox)."""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import git
from typer.testing import CliRunner

import agent.run.command
from agent.cli import app
from agent.record.journal import run_directories
from agent.worktree.workspace import WIP_REF_PREFIX

from support import background
from support.cli_runs import LOCAL_AGENT, cli_command, kill_processes_under, processes_under, start_cli, wait_for
from support.local_cli import ForkedCli, start_local_cli
from support.local_sandbox import LocalSandboxes
from support.repos import BREAK, REPAIR, SAMPLE_FILES, made_at_a_root, make_repo, once_made
from support.scripted_server import Hold, Reply, ScriptedServer

THREE_STEPS = [
    Reply(tool_calls=[("create_file", {"path": "pkg/one.py", "content": "ONE = 1\n"})]),
    Reply(tool_calls=[("create_file", {"path": "pkg/two.py", "content": "TWO = 2\n"})]),
    Reply(tool_calls=[("bash", {"command": "echo three > three.txt && echo wrote three"})]),
]
FINISH = Reply(tool_calls=[("finish", {"summary": "Add one, two and three"})])


def killed_run(
    tmp_path: Path,
    script: list,
    *tasks: str,
    until: str = "held",
    cli: tuple[str, ...] = LOCAL_AGENT,
    files: dict[str, str] | None = None,
) -> tuple[Path, Path, list[dict]]:
    """A run killed with SIGKILL once the scripted server holds a request (or `until` a command whose line holds
    that text runs); returns the repository, the run directory and the requests the server received."""
    repo = make_repo(tmp_path / "repo", files or SAMPLE_FILES)
    runs_dir = tmp_path / "runs"
    scratch = tmp_path / "scratch"
    with ScriptedServer(script) as server:
        command = cli_command(repo, server, runs_dir, *tasks, cli=cli)
        process = start_killable(command, scratch)
        try:
            if until == "held":
                wait_for(server.held, "the held request")
            else:
                wait_for(lambda: processes_under(scratch, until), "the command to run")
        finally:
            process.kill()
            process.wait(timeout=60)
            kill_processes_under(scratch)  # what a removed container's processes would not outlive
        requests = list(server.requests)
    (run_dir,) = run_directories(runs_dir)
    return repo, run_dir, requests


@dataclass
class Killed:
    """What killed_run left at `root` (its tmp_path)."""

    root: Path
    repo: Path
    run_dir: Path
    requests: list[dict]  # what the server received before the kill; read, never changed


@dataclass(frozen=True, eq=False)
class KilledState:
    """killed_run of `script` and `tasks`, made once per session for the tests that resume or discard that same
    run, and put back for each where it was made (support/repos.py: made_once): a killed run's CLI, forked and
    killed, costs ten times the copy. A test that marks it (@pytest.mark.started_at_collection(state)) has it made
    in the background as collection ends (support/background.py), where the run's processes take the other core
    while the session goes on."""

    script: list
    tasks: tuple[str, ...]
    until: str = "held"

    def __call__(self) -> tuple[Killed, Path, Path]:
        """The state made at a root of its own, the root and its copy (what the background's process makes)."""
        return made_at_a_root(self._kill)

    def _kill(self, root: Path) -> Killed:
        return Killed(root, *killed_run(root, self.script, *self.tasks, until=self.until))

    def made(self) -> Killed:
        return once_made(self, lambda: background.made(self), lambda killed: killed.repo)


# The session's killed runs that test_resume resumes.
AFTER_THREE_STEPS = KilledState([*THREE_STEPS, Hold()], ("Add one, two and three",))
AFTER_ONE_STEP = KilledState([THREE_STEPS[0], Hold()], ("Add one",))
IN_A_COMMAND = KilledState(
    [THREE_STEPS[0], Reply(tool_calls=[("bash", {"command": "sleep 300 && touch slept.txt"})])],
    ("Add one",),
    until="sleep 300",
)
IN_THE_SECOND_TASK = KilledState([THREE_STEPS[0], FINISH, THREE_STEPS[1], Hold()], ("first", "second"))
FINISH_PERIMETER = Reply(tool_calls=[("finish", {"summary": "Add perimeter"})])
IN_A_REPAIR_ROUND = KilledState([BREAK, FINISH_PERIMETER, REPAIR, Hold()], ("Add perimeter",))


def start_killable(command: list[str], scratch: Path) -> ForkedCli | subprocess.Popen:
    """The CLI of `command` as a process to kill, its output discarded: LOCAL_AGENT's forked with its imports done."""
    if tuple(command[: len(LOCAL_AGENT)]) == LOCAL_AGENT:
        return start_local_cli(command, scratch)
    return start_cli(command, scratch, stdout=subprocess.DEVNULL)


def resume_command(run_dir: Path, server: ScriptedServer, cli: tuple[str, ...] = LOCAL_AGENT) -> list[str]:
    runs = ["--runs-dir", str(run_dir.parent)]
    return [*cli, "resume", run_dir.name, *runs, "--server", server.url]


def local_cli_here(command: list[str], scratch: Path) -> subprocess.CompletedProcess:
    """A LOCAL_AGENT command line run in this process, as support/local_cli.py runs it, with its scratch directories
    under `scratch` (start_cli's TMPDIR): for the runs that are not killed, whose process is not what is tested and
    whose start-up (imports) would be most of their time."""
    assert tuple(command[: len(LOCAL_AGENT)]) == LOCAL_AGENT
    scratch.mkdir(exist_ok=True)
    with (
        mock.patch.object(agent.run.command, "docker_sandboxes", LocalSandboxes),
        mock.patch.object(tempfile, "tempdir", str(scratch)),
    ):
        result = CliRunner().invoke(app, command[len(LOCAL_AGENT) :], catch_exceptions=False)
    return subprocess.CompletedProcess(command, result.exit_code, result.output)


def resume(
    tmp_path: Path, run_dir: Path, script: list, cli: tuple[str, ...] = LOCAL_AGENT
) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """`resume` of a killed run: the real CLI's process (`cli`), or LOCAL_AGENT's command in this process."""
    with ScriptedServer(script) as server:
        command = resume_command(run_dir, server, cli)
        if cli == LOCAL_AGENT:
            return local_cli_here(command, tmp_path / "scratch"), list(server.requests)
        process = start_cli(command, tmp_path / "scratch", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        output, _ = process.communicate(timeout=600)
        return subprocess.CompletedProcess(command, process.returncode, output.decode()), list(server.requests)


def wip_refs(repo: Path) -> list[str]:
    listing = git.Repo(repo).git.for_each_ref("--format=%(refname)", WIP_REF_PREFIX)
    return listing.split()
