"""A run over a fleet of two scripted servers (sandboxes on this machine, real git): tasks in parallel, one per server,
and the task of a server that dies mid-run moves to the other one and still ends committed; a run of tasks in
parallel on the slots of one server (--parallel). The night's deadline and a task's time limit hold in the tasks'
threads as they do when tasks run one after the other."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import git
import pytest
from typer.testing import CliRunner

import agent.run.command
from agent.cli import app
from agent.dispatch.fleet import FleetDispatch
from agent.protocol.config import LLMConfig, NightConfig, RunConfig
from agent.protocol.events import Event
from agent.protocol.records import RunSummary
from agent.record.journal import RunJournal
from agent.run.compose import build_run
from agent.run.interrupt import stop_signals
from agent.run.run import Run

from support.background import State
from support.cli_runs import read_run
from support.limits import HeldLimits, moved_clock
from support.llama_fixtures import free_port
from support.local_sandbox import LocalSandboxes
from support.repos import SAMPLE_FILES, make_repo
from support.scripted_model import ScriptedModel
from support.scripted_server import Die, Reply, ScriptedServer

TASKS = {"alpha": "Add the alpha module", "beta": "Add the beta module"}
# The limits' tests do not wait for a task to get its work done in time: a limit that falls first stops its task
# once the task is in flight (support/limits.py), so the limits are as short as their messages allow.
TASK_TIMEOUT_S = 1
# Far enough for any task to start however slow the machine: the test moves the limits' clock to it.
DEADLINE_S = 3600
MIN_TASK_TIME_S = 10


@pytest.fixture
def local_sandboxes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sandboxes_here(monkeypatch, tmp_path)


def sandboxes_here(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """`run` on the command line with its tasks' sandboxes on this machine (their folders under `root`)."""
    monkeypatch.setattr(agent.run.command, "docker_sandboxes", lambda: LocalSandboxes(root))


def create(key: str) -> Reply:
    return Reply(tool_calls=[("create_file", {"path": f"pkg/{key}.py", "content": f"NAME = {key!r}\n"})])


def look() -> Reply:
    return Reply(tool_calls=[("view_file", {"path": "pkg/geometry.py"})])


def finish(key: str) -> Reply:
    return Reply(tool_calls=[("finish", {"summary": f"Add pkg/{key}.py"})])


def fleet_run(tmp_path: Path, repo: Path, urls: list[str], events: list, **llm: object) -> tuple[Run, FleetDispatch]:
    config_llm = LLMConfig(server_url=urls[0], servers=urls, **llm)
    config = RunConfig(repo=repo, tasks=list(TASKS.values()), runs_dir=tmp_path / "runs", max_turns=40, llm=config_llm)
    dispatch = FleetDispatch(config_llm)
    run = build_run(
        config,
        repos={repo: git.Repo(repo)},
        sandboxes=LocalSandboxes(tmp_path),
        model=ScriptedModel([]),  # each task gets its own model on the fleet
        server_url=urls[0],
        journal=RunJournal(config.runs_dir, "fleet-run"),
        observe=events.append,
        dispatch=dispatch,
    )
    return run, dispatch


def run_night(night: NightConfig, run_id: str, observe: Callable[[Event], None]) -> RunSummary:
    """The night over the fleet of its first entry's servers, in this process."""
    run = build_run(
        night,
        repos={path: git.Repo(path) for path in night.repositories()},
        sandboxes=LocalSandboxes(night.runs_dir.parent),
        model=ScriptedModel([]),  # each task gets its own model on the fleet
        server_url=night.repos[0].llm.fleet[0],
        journal=RunJournal(night.runs_dir, run_id),
        observe=observe,
        dispatch=FleetDispatch(night.repos[0].llm),
    )
    try:
        return run.execute()
    finally:
        run.journal.close()


def endless(key: str, arrived: Callable[[], None] | None = None) -> Reply:
    """A request the server keeps prefilling for ten minutes, streaming its progress; `arrived` runs when it comes."""
    return Reply(
        tool_calls=[("finish", {"summary": f"Add pkg/{key}.py"})],
        prefill_chunks=6000,
        prefill_interval_s=0.1,
        before=arrived,
    )


def test_the_task_of_a_server_that_dies_moves_to_the_other_server(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", SAMPLE_FILES)
    # Whichever task lands on the dying server does two turns there; any task's conversation on the healthy one
    # (from its start, or continued after the move) ends after re-creating its file, which is idempotent.
    dying_scripts = {text: [create(key), look(), Die()] for key, text in TASKS.items()}
    healthy_scripts = {text: [create(key), finish(key)] for key, text in TASKS.items()}
    with ScriptedServer(scripts=dying_scripts) as dying, ScriptedServer(scripts=healthy_scripts) as healthy:
        events: list = []
        run, dispatch = fleet_run(
            tmp_path,
            repo,
            [dying.url, healthy.url],
            events,
            max_retries=1,
            retry_backoff_s=0.01,
            idle_timeout_s=20,
        )
        summary = run.execute()
        run.journal.close()
    assert [(task.index, task.status, task.verdict) for task in summary.tasks] == [
        (1, "committed", "verified"),
        (2, "committed", "verified"),
    ]
    user = git.Repo(repo)
    for task, key in zip(summary.tasks, TASKS, strict=True):
        assert user.commit(task.branch).tree[f"pkg/{key}.py"].data_stream.read() == f"NAME = {key!r}\n".encode()
    assert dispatch.pool.live() == [healthy.url] and dying.url in dispatch.pool.taken_out()
    placements = [(event.task, event.server, event.reason) for event in events if event.type == "task_server"]
    first_on_dying = [task for task, server, _ in placements if server == dying.url]
    assert len(first_on_dying) == 1, "one task at a time per server: the two tasks started on different servers"
    moved = first_on_dying[0]
    assert [server for task, server, _ in placements if task == moved] == [dying.url, healthy.url]
    assert next(reason for task, server, reason in placements if task == moved and server == healthy.url).startswith(
        f"failover: {dying.url} stopped answering"
    )
    transcript = tmp_path / "runs" / "fleet-run" / "transcript.jsonl"
    lines = [json.loads(line) for line in transcript.read_text().splitlines()]
    starts = [line["task"] for line in lines if line["type"] == "task_start"]
    assert sorted(starts) == [1, 2]
    served = [line for line in lines if line["type"] == "task_server"]
    assert len(served) == 3, "each placement is in the journal, with its task"
    assert all(line["task"] in (1, 2) for line in lines if line["type"] in ("request", "response", "tool_call"))
    assert summary.exit_code == 0


def _stopped(tmp_path: Path) -> tuple[Path, RunSummary, int]:
    """A run of two tasks stopped by SIGTERM once both work: the repository, the summary, the requests asked."""
    repo = make_repo(tmp_path / "repo", SAMPLE_FILES)
    slow_look = Reply(tool_calls=[("view_file", {"path": "pkg/geometry.py"})], prefill_chunks=3, prefill_interval_s=0.1)
    scripts = {text: [create(key)] + [slow_look] * 30 for key, text in TASKS.items()}
    with ScriptedServer(scripts=scripts) as first, ScriptedServer(scripts=scripts) as second:
        events: list = []
        run, _ = fleet_run(tmp_path, repo, [first.url, second.url], events)

        done = threading.Event()

        def both_work() -> bool:
            return min(len(first.requests), len(second.requests)) >= 3

        def stop_when_both_work() -> None:
            deadline = time.monotonic() + 120
            while not both_work() and not done.is_set() and time.monotonic() < deadline:
                time.sleep(0.05)
            # Never after the run: outside stop_signals() the signal would end the test process itself.
            if both_work() and not done.is_set():
                os.kill(os.getpid(), signal.SIGTERM)

        stopper = threading.Thread(target=stop_when_both_work, daemon=True)
        with stop_signals():
            stopper.start()
            try:
                summary = run.execute()
            finally:
                done.set()
                stopper.join()
        run.journal.close()
        asked = len(first.requests) + len(second.requests)
    return repo, summary, asked


# Every other run of this module (this one, TIMED_OUT, IN_TWO_SLOTS, DEAD_AT_START[False]) is made in the background
# from the session's collection on (support/background.py), on the other core while the session runs the ones
# between.
STOPPED = State(_stopped, lambda made: made[0])


@pytest.mark.started_at_collection(STOPPED)
def test_a_stop_signal_settles_every_task_in_flight_as_interrupted() -> None:
    repo, summary, asked = STOPPED.made()
    assert (summary.status, summary.interrupted_by) == ("interrupted", "SIGTERM")
    assert [(task.index, task.status) for task in summary.tasks] == [(1, "interrupted"), (2, "interrupted")]
    assert asked < 20, "the tasks stopped at their next request instead of running their scripts out"
    user = git.Repo(repo)
    for task, key in zip(summary.tasks, TASKS, strict=True):
        commit = user.commit(task.branch)
        assert commit.tree[f"pkg/{key}.py"].data_stream.read() == f"NAME = {key!r}\n".encode()
        assert "Refactor-Agent-Status: interrupted" in commit.message


def test_a_night_of_two_repositories_over_two_servers_prepares_each_repository_once(tmp_path: Path) -> None:
    repos = {key: make_repo(tmp_path / key, SAMPLE_FILES) for key in TASKS}
    scripts = {text: [create(key), finish(key)] for key, text in TASKS.items()}
    with ScriptedServer(scripts=scripts) as first, ScriptedServer(scripts=scripts) as second:
        llm = LLMConfig(servers=[first.url, second.url])
        night = NightConfig(
            repos=[RunConfig(repo=repos[key], tasks=[text], max_turns=10, llm=llm) for key, text in TASKS.items()],
            runs_dir=tmp_path / "runs",
        )
        events: list = []
        summary = run_night(night, "fleet-night", events.append)
    assert [(task.repo, task.status) for task in summary.tasks] == [(str(repos[key]), "committed") for key in TASKS]
    assert sorted(record.repo for record in summary.environments) == sorted(str(path) for path in repos.values())
    assert len([event for event in events if event.type == "environment"]) == 2, "one environment per repository"
    for task, key in zip(summary.tasks, TASKS, strict=True):
        assert git.Repo(repos[key]).commit(task.branch).tree[f"pkg/{key}.py"].data_stream.read()


def _timed_out(tmp_path: Path) -> tuple[Path, RunSummary]:
    """A night over a fleet whose first task has a time limit: the repository and the summary."""
    repo = make_repo(tmp_path / "repo", SAMPLE_FILES)
    limits = HeldLimits()  # alpha's limit stops it once it has written its file and waits on the server
    alpha_steps = [create("alpha"), endless("alpha", arrived=limits.in_flight.set)]
    scripts = {TASKS["alpha"]: alpha_steps, TASKS["beta"]: [create("beta"), finish("beta")]}
    with ScriptedServer(scripts=scripts) as first, ScriptedServer(scripts=scripts) as second, limits:
        llm = LLMConfig(servers=[first.url, second.url])
        night = NightConfig(  # per-task settings: a group of its own for the task with a limit
            repos=[
                RunConfig(repo=repo, tasks=[TASKS["alpha"]], max_turns=10, llm=llm, task_timeout_s=TASK_TIMEOUT_S),
                RunConfig(repo=repo, tasks=[TASKS["beta"]], max_turns=10, llm=llm),
            ],
            runs_dir=tmp_path / "runs",
        )
        summary = run_night(night, "fleet-timeout", lambda _event: None)
    return repo, summary


TIMED_OUT = State(_timed_out, lambda made: made[0])


@pytest.mark.started_at_collection(TIMED_OUT)
def test_a_task_over_its_time_limit_on_a_fleet_is_timed_out_with_its_work_while_the_other_commits() -> None:
    repo, summary = TIMED_OUT.made()
    alpha, beta = summary.tasks
    assert (alpha.status, beta.status, beta.verdict) == ("timed_out", "committed", "verified")
    assert alpha.reason.startswith(f"--task-timeout {TASK_TIMEOUT_S}s: stopped at ")
    assert alpha.wall_time_s < 300, "stopped at its limit, not when the server's prefill ended"
    user = git.Repo(repo)
    (commit,) = user.iter_commits(f"main..{alpha.branch}")
    assert list(commit.stats.files) == ["pkg/alpha.py"]
    assert "Refactor-Agent-Status: timed_out" in commit.message.splitlines()
    assert user.commit(beta.branch).tree["pkg/beta.py"].data_stream.read() == b"NAME = 'beta'\n"
    assert "+NAME = 'alpha'" in (repo.parent / "runs" / "fleet-timeout" / "patch.diff").read_text()
    assert summary.exit_code == 1


def test_at_the_deadline_a_fleet_stops_its_tasks_in_flight_and_skips_those_that_cannot_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo", SAMPLE_FILES)
    tasks = {**TASKS, "gamma": "Add the gamma module"}
    limits = HeldLimits()  # the deadline stops alpha and beta once both have written their files
    both_in_flight = threading.Barrier(2, action=limits.in_flight.set, timeout=120)
    scripts = {text: [create(key), endless(key, arrived=both_in_flight.wait)] for key, text in tasks.items()}
    deadline = datetime.now().astimezone() + timedelta(seconds=DEADLINE_S)
    clock = moved_clock(monkeypatch)
    # Two tasks start at once, with time to spare; once both have started, the clock is at the deadline, which falls
    # while they hold their servers. The third one would start with less than --min-task-time left.
    both_started = threading.Barrier(2, action=lambda: clock.move_to(deadline), timeout=120)

    def observe(event: Event) -> None:
        if event.type == "task_start":
            both_started.wait()

    with ScriptedServer(scripts=scripts) as first, ScriptedServer(scripts=scripts) as second, limits:
        llm = LLMConfig(servers=[first.url, second.url])
        night = NightConfig(
            repos=[RunConfig(repo=repo, tasks=list(tasks.values()), max_turns=10, llm=llm)],
            runs_dir=tmp_path / "runs",
            deadline_at=deadline,
            min_task_time_s=MIN_TASK_TIME_S,
        )
        started = time.monotonic()
        summary = run_night(night, "fleet-deadline", observe)
    alpha, beta, gamma = summary.tasks
    assert [task.status for task in summary.tasks] == ["timed_out", "timed_out", "skipped"]
    assert all(task.reason.startswith("deadline: stopped at ") for task in (alpha, beta))
    assert gamma.reason.startswith("deadline: ") and f"less than --min-task-time {MIN_TASK_TIME_S}s" in gamma.reason
    let_go_s = limits.released_at - started  # from then on the deadline could stop the tasks: both were in flight
    assert summary.wall_time_s < let_go_s + 120, "the night ended soon after its deadline"
    user = git.Repo(repo)
    for task, key in zip((alpha, beta), tasks, strict=False):
        assert user.commit(task.branch).tree[f"pkg/{key}.py"].data_stream.read() == f"NAME = {key!r}\n".encode()
        assert "Refactor-Agent-Status: timed_out" in user.commit(task.branch).message


def _in_two_slots(tmp_path: Path) -> tuple[Path, int, str, list[dict]]:
    """`run --parallel 2` of two tasks on a server of two slots: the runs folder, the exit code, the output and the
    requests the server received."""
    repo = make_repo(tmp_path / "repo", SAMPLE_FILES)
    together = threading.Barrier(2, timeout=120)  # each task's first reply waits for the other task's first request

    def meet() -> None:
        together.wait()

    first = {key: Reply(tool_calls=create(key).tool_calls, before=meet) for key in TASKS}
    scripts = {text: [first[key], look(), finish(key)] for key, text in TASKS.items()}
    with ScriptedServer(scripts=scripts, slots=2) as server, pytest.MonkeyPatch.context() as patch:
        sandboxes_here(patch, tmp_path)
        command = ["run", str(repo), *[part for text in TASKS.values() for part in ("--task", text)]]
        runs = tmp_path / "runs"
        result = CliRunner().invoke(app, [*command, "--server", server.url, "--parallel", "2", "--runs-dir", str(runs)])
        return runs, result.exit_code, result.output, list(server.requests)


IN_TWO_SLOTS = State(_in_two_slots, lambda made: made[0].parent / "repo")  # in the background (see STOPPED)


@pytest.mark.started_at_collection(IN_TWO_SLOTS)
def test_parallel_tasks_on_one_server_each_in_a_slot_of_its_own() -> None:
    """`run --parallel 2`: both tasks in flight at once on one server, each pinned to its own slot throughout."""
    runs, exit_code, output, requests = IN_TWO_SLOTS.made()
    assert exit_code == 0, output
    _run_dir, summary, lines = read_run(runs)
    assert [(task["index"], task["status"]) for task in summary["tasks"]] == [(1, "committed"), (2, "committed")]
    slot_of = {}
    for request in requests:
        task = next(text for text in TASKS.values() if text in json.dumps(request["messages"]))
        slot_of.setdefault(task, set()).add(request["id_slot"])
    assert sorted(slot_of.values(), key=sorted) == [{0}, {1}], "each task's every request in its own slot"
    placed = {line["task"]: line["slot"] for line in lines if line["type"] == "task_server"}
    assert sorted(placed.values()) == [0, 1] and sorted(placed) == [1, 2]


def _with_a_dead_server(dead_first: bool) -> Callable[[Path], tuple[Path, int, str, str, str]]:
    def run(tmp_path: Path) -> tuple[Path, int, str, str, str]:
        """`run` over a fleet of a dead server and a live one: the runs folder, the exit code, the output, the dead
        server and the live one."""
        repo = make_repo(tmp_path / "repo", SAMPLE_FILES)
        dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
        scripts = {text: [create(key), finish(key)] for key, text in TASKS.items()}
        tasks = [option for text in TASKS.values() for option in ("--task", text)]
        runs = tmp_path / "runs"
        with ScriptedServer(scripts=scripts) as live, pytest.MonkeyPatch.context() as patch:
            sandboxes_here(patch, tmp_path)
            servers = [dead, live.url] if dead_first else [live.url, dead]
            options = [*(option for url in servers for option in ("--server", url)), "--runs-dir", str(runs)]
            result = CliRunner().invoke(app, ["run", str(repo), *tasks, *options])
        return runs, result.exit_code, result.stdout, dead, live.url

    return run


# The dead-second run is made in the background while the session runs the dead-first one (see STOPPED).
DEAD_AT_START = {
    dead_first: State(_with_a_dead_server(dead_first), lambda made: made[0].parent / "repo")
    for dead_first in (True, False)
}


@pytest.mark.parametrize(
    "dead_first",
    [
        pytest.param(True, id="dead-first"),
        pytest.param(False, id="dead-second", marks=pytest.mark.started_at_collection(DEAD_AT_START[False])),
    ],
)
def test_a_fleet_server_dead_at_start_is_skipped_in_one_line_and_the_tasks_commit_on_the_live_one(
    dead_first: bool,
) -> None:
    runs, exit_code, output, dead, live = DEAD_AT_START[dead_first].made()
    assert exit_code == 0, output
    skipped = [line for line in output.splitlines() if dead in line]
    assert skipped == [f"warning: {dead} does not answer: left out of the fleet for this run (1 of 2 servers answer)"]
    _, summary, transcript = read_run(runs)
    assert [(task["status"], task["verdict"]) for task in summary["tasks"]] == [("committed", "verified")] * 2
    assert {event["server"] for event in transcript if event["type"] == "task_server"} <= {live}


def test_a_fleet_whose_servers_all_are_dead_is_one_line_and_exit_2(tmp_path: Path, local_sandboxes: None) -> None:
    repo = make_repo(tmp_path / "repo", SAMPLE_FILES)
    dead = sorted({f"http://127.0.0.1:{free_port()}/v1" for _ in range(4)})[:2]  # two of them, not one twice
    options = ["--server", dead[0], "--server", dead[1], "--runs-dir", str(tmp_path / "runs")]
    result = CliRunner().invoke(app, ["run", str(repo), "--task", "x", *options])
    assert result.exit_code == 2
    assert (
        result.stderr == f"error: no server of the fleet answers ({dead[0]}, {dead[1]}): start them, or name others\n"
    )
    assert not (tmp_path / "runs").exists()
