"""The night's deadline and a task's time limit: a model that never finishes is told time is up, then stopped; its
work is kept, later tasks are skipped, and the process ends soon after the deadline whatever the server does.
The limit reaches the thread that runs the task, the main one (SIGALRM) or any other (a fleet's, a Ray worker's)."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import git
import pytest

from agent.dispatch import seats
from agent.dispatch.seats import ServerPool
from agent.protocol.config import LLMConfig, RunConfig
from agent.record.journal import run_directories
from agent.run import time_limit as time_limit_module
from agent.run.time_limit import TIME_UP_MESSAGE, TimeUp, grace_start, time_limit, wait_in_time
from agent.run.time_limit import _Watchdog as Watchdog
from agent.server.chat import OpenAIChatModel
from sandbox import DEFAULT_IMAGE, DockerSandbox, docker_client

from support.cli_runs import cli_command, start_cli
from support.limits import HeldLimits, on_stack
from support.repos import make_repo
from support.scripted_model import ScriptedModel, run_in_process
from support.scripted_server import Hold, Reply, ScriptedServer, Stall, Step

T = TypeVar("T")
MESSAGES = [{"role": "system", "content": "sys"}, {"role": "user", "content": "do it"}]


def in_worker_thread(work: Callable[[], T]) -> T:
    """`work()` in a thread of its own, as a fleet runs a task; what it returned, or what it raised, here."""
    outcome: list[tuple[bool, object]] = []

    def target() -> None:
        try:
            outcome.append((True, work()))
        except BaseException as error:  # TimeUp included: it is what the tests look for
            outcome.append((False, error))

    thread = threading.Thread(target=target, daemon=True)  # one that nothing stopped must not hold up the session
    thread.start()
    thread.join(180)
    assert not thread.is_alive(), "the worker thread still runs: nothing stopped it"
    [(returned, value)] = outcome
    if not returned:
        raise value  # type: ignore[misc]
    return value  # type: ignore[return-value]


def sleep_until_stopped(at_most_s: float = 30) -> None:
    """Short sleeps, Python code in between: where an exception sent to a thread is raised."""
    ends = time.monotonic() + at_most_s
    while time.monotonic() < ends:
        time.sleep(0.02)
    raise AssertionError(f"nothing stopped the work within {at_most_s:g}s")


def run_in(where: str, work: Callable[[], T]) -> T:
    return work() if where == "main thread" else in_worker_thread(work)


def watchdog(limit: object) -> Watchdog:
    """A worker thread's limit, whose timer the test can wait for."""
    assert isinstance(limit, Watchdog)
    return limit


def after_the_watchdog(limit: Watchdog) -> None:
    """Returns once the limit's timer is done (it fired or was cancelled), running Python code after: where a late
    TimeUp it sent to this thread would be raised. Its timer waited for instead of a time that outlasts it."""
    limit.timer.join(60)
    assert not limit.timer.is_alive()
    for _ in range(3):
        time.sleep(0.001)


@pytest.fixture
def quick_wakes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The waits of a task's thread wake every 20 ms instead of every WAKE_S: a TimeUp reaches them as it would, only
    sooner."""
    monkeypatch.setattr(time_limit_module, "WAKE_S", 0.02)
    monkeypatch.setattr(seats, "WAKE_S", 0.02)


@pytest.fixture
def no_enclosing_alarm() -> Iterator[None]:
    """pytest-timeout's SIGALRM held off during the test: an alarm a limit left armed would go unseen under it, as
    the limit re-arms the enclosing alarm, over its own, on the way out."""
    delay, interval = signal.setitimer(signal.ITIMER_REAL, 0)
    started = time.monotonic()
    yield
    if delay:
        signal.setitimer(signal.ITIMER_REAL, max(0.001, delay - (time.monotonic() - started)), interval)


def test_the_limit_raises_in_the_main_thread_and_is_cleared_on_the_way_out(no_enclosing_alarm: None) -> None:
    with pytest.raises(TimeUp, match="deadline"), time_limit(time.time() + 0.05, "deadline"):
        time.sleep(30)  # a blocking call is cut short
    end = time.time() + 0.2
    with time_limit(end, "deadline"):
        pass
    time.sleep(end - time.time() + 0.1)  # no late alarm once the block is left, when the limit has passed


def test_in_a_worker_thread_the_limit_raises_there_and_a_limit_left_in_time_never_fires() -> None:
    def work() -> str:
        left_in_time = watchdog(time_limit(time.time() + 0.2, "left in time"))
        with left_in_time:
            pass
        falls = watchdog(time_limit(time.time() + 0.05, "deadline"))
        with pytest.raises(TimeUp) as raised, falls:
            sleep_until_stopped()
        # No late TimeUp from the first limit, nor a second one from this.
        after_the_watchdog(left_in_time)
        after_the_watchdog(falls)
        return raised.value.reason

    assert in_worker_thread(work) == "deadline"


@pytest.mark.parametrize("where", ["main thread", "worker thread"])
def test_limits_nest_and_the_earlier_one_fires_with_its_reason(where: str) -> None:
    def work() -> list[str]:
        reasons = []
        with pytest.raises(TimeUp) as raised, time_limit(time.time() + 0.05, "outer"):
            with time_limit(time.time() + 60, "inner"):
                sleep_until_stopped()
        reasons.append(raised.value.reason)
        # The inner limit falls first and is handled inside the outer one, which still holds afterwards (0.3 s
        # later: time enough for a loaded machine to keep the order).
        with pytest.raises(TimeUp) as raised, time_limit(time.time() + 0.35, "outer"):
            with pytest.raises(TimeUp) as inner, time_limit(time.time() + 0.05, "inner"):
                sleep_until_stopped()
            reasons.append(inner.value.reason)
            sleep_until_stopped()
        reasons.append(raised.value.reason)
        return reasons

    assert run_in(where, work) == ["outer", "inner", "outer"]


@pytest.mark.parametrize(
    "first", ["the limit falls, then the block is left", "the block is left, then the limit falls"]
)
def test_a_limit_that_falls_while_its_block_is_being_left_raises_nothing_then_or_after(first: str) -> None:
    """The timer and the thread leaving the block meet at the watchdogs' lock, held here until both wait for it."""
    limits: list[tuple[int, Watchdog]] = []

    def both_wait() -> bool:
        if not limits:
            return False
        [(thread_id, limit)] = limits
        return on_stack(thread_id, Watchdog.__exit__) and on_stack(limit.timer.ident, Watchdog._expire)

    def work() -> None:
        limit = watchdog(time_limit(time.time() + 0.05, "race"))
        with limit:
            limits.append((threading.get_ident(), limit))
            if first.startswith("the limit falls"):
                # Until it has fallen and its timer waits for the lock (which keeps its TimeUp unsent meanwhile).
                while not on_stack(limit.timer.ident, Watchdog._expire):
                    time.sleep(0.005)
        after_the_watchdog(limit)

    with HeldLimits() as held:
        held.release_when(both_wait)
        in_worker_thread(work)


def test_in_a_worker_thread_the_limit_stops_a_model_request_the_server_is_still_prefilling() -> None:
    limits = HeldLimits()  # the limit has fallen when the request starts; it stops the request once the server has it
    # 200 s of prefill, streamed
    endless = Reply(content="late", prefill_chunks=10000, prefill_interval_s=0.02, before=limits.in_flight.set)
    with ScriptedServer([endless]) as server, limits:
        model = OpenAIChatModel(LLMConfig(server_url=server.url, max_retries=0, idle_timeout_s=60))

        def request() -> None:
            with time_limit(time.time(), "--task-timeout 1s"):
                model.complete(MESSAGES, [])

        started = time.monotonic()
        with pytest.raises(TimeUp, match="--task-timeout 1s"):
            in_worker_thread(request)
    assert time.monotonic() - started < 60, "stopped at the limit, not when the prefill ended"


class TellsWhenAsked(ScriptedServer):
    """Sets `asked` when a request comes, before it plays the script's step."""

    def __init__(self, script: list[Step], asked: threading.Event) -> None:
        super().__init__(script)
        self.asked = asked

    def next_step(self, body: dict[str, Any]) -> tuple[Step, int, int]:
        self.asked.set()
        return super().next_step(body)


def test_in_a_worker_thread_a_silent_server_gives_way_to_the_limit_at_its_idle_timeout() -> None:
    """A socket read cannot be cut short from another thread: the limit is raised when --idle-timeout ends the read,
    instead of the request being retried."""
    limits = HeldLimits()  # a limit that falls before the server has the request waits for it
    with TellsWhenAsked([Stall(), Stall(), Stall()], limits.in_flight) as server, limits:
        config = LLMConfig(server_url=server.url, max_retries=2, retry_backoff_s=0, idle_timeout_s=0.6)
        model = OpenAIChatModel(config)

        def request() -> None:
            with time_limit(time.time() + 0.1, "deadline"):  # while the server is silent, before the idle timeout
                model.complete(MESSAGES, [])

        with pytest.raises(TimeUp, match="deadline"):
            in_worker_thread(request)
        assert len(server.requests) == 1, "not retried once the time was up"


def test_in_a_worker_thread_the_limit_stops_a_wait_for_work_in_another_thread(quick_wakes: None) -> None:
    """The baseline runs beside the packing in a thread of its own; the task's thread waits for it."""

    def wait_forever() -> None:
        with time_limit(time.time() + 0.1, "deadline"):
            wait_in_time(Future())

    with pytest.raises(TimeUp, match="deadline"):
        in_worker_thread(wait_forever)


def test_in_a_worker_thread_the_limit_stops_a_task_waiting_for_a_free_server(quick_wakes: None) -> None:
    pool = ServerPool(["http://a:1/v1"])
    pool.acquire(None)  # another task holds the fleet's only slot

    def wait_for_a_server() -> None:
        with time_limit(time.time() + 0.1, "deadline"):
            pool.acquire(None)

    with pytest.raises(TimeUp, match="deadline"):
        in_worker_thread(wait_for_a_server)


@pytest.mark.docker
def test_in_a_worker_thread_the_limit_stops_a_long_sandbox_command(tmp_path: Path) -> None:
    with DockerSandbox(DEFAULT_IMAGE, tmp_path, run_id="test-time-limit", client=docker_client()) as box:

        def command() -> None:
            with time_limit(time.time() + 2, "--task-timeout 2s"):
                box.execute("sleep 300", timeout_s=600)

        started = time.monotonic()
        with pytest.raises(TimeUp, match="--task-timeout 2s"):
            in_worker_thread(command)
        assert time.monotonic() - started < 60, "stopped at the limit, not at the command's end"
        assert box.execute("echo still usable").output == "still usable\n"


def test_the_grace_period_is_at_most_a_quarter_of_the_time() -> None:
    assert grace_start(0, 40) == 30
    assert grace_start(0, 7200) == 7200 - 300


class HoldsOnceTold(ScriptedServer):
    """Plays its script until a request carries the time-up message; that one it never answers."""

    def next_step(self, body: dict[str, Any]) -> tuple[Step, int, int]:
        step, prompt_n, cache_n = super().next_step(body)
        told = body.get("messages", [{}])[-1].get("content") == TIME_UP_MESSAGE
        return (Hold() if told else step), prompt_n, cache_n


@pytest.mark.docker
def test_a_model_that_never_finishes_is_told_then_stopped_at_the_deadline(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    runs_dir = tmp_path / "runs"
    deadline_s = 30
    # Commands run one after the other until the grace period starts, whenever the task started; more than the
    # deadline leaves time for.
    working = [Reply(tool_calls=[("bash", {"command": "sleep 0.5"})]) for _ in range(deadline_s * 2)]
    script = [Reply(tool_calls=[("create_file", {"path": "pkg/half.py", "content": "HALF = 1\n"})]), *working]
    with HoldsOnceTold(script) as server:
        command = [*cli_command(repo, server, runs_dir, "first", "second"), "--deadline", f"{deadline_s}s"]
        process = start_cli([*command, "--min-task-time", "5s"], tmp_path / "scratch", stdout=subprocess.DEVNULL)
        try:
            exit_code = process.wait(timeout=180)  # ends instead of waiting on the held request forever
        finally:
            process.kill()
        requests = list(server.requests)
    assert exit_code == 1
    told = [m for m in requests[-1]["messages"] if m.get("content") == TIME_UP_MESSAGE]
    assert len(told) == 1 and requests[-1]["messages"][-1]["content"] == TIME_UP_MESSAGE  # appended, once
    (run_dir,) = run_directories(runs_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    first, second = summary["tasks"]
    assert (first["status"], second["status"]) == ("timed_out", "skipped")
    assert summary["wall_time_s"] < deadline_s + 60  # the deadline, then at most a minute to settle
    assert second["reason"].startswith("deadline: ")
    (commit,) = git.Repo(repo).iter_commits(f"main..{first['branch']}")
    assert list(commit.stats.files) == ["pkg/half.py"]
    assert "Refactor-Agent-Status: timed_out" in commit.message.splitlines()
    assert "+HALF = 1" in (run_dir / "patch.diff").read_text()


@pytest.mark.docker
def test_a_task_over_its_time_limit_is_timed_out_and_the_next_one_runs(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    config = RunConfig(repo=repo, tasks=["slow", "quick"], runs_dir=tmp_path / "runs", task_timeout_s=10)
    script = [
        Reply(tool_calls=[("create_file", {"path": "pkg/slow.py", "content": "SLOW = 1\n"})]),
        Reply(tool_calls=[("bash", {"command": "sleep 120"})]),  # cut off by the task's limit
        Reply(tool_calls=[("create_file", {"path": "pkg/quick.py", "content": "QUICK = 1\n"})]),
        Reply(tool_calls=[("finish", {"summary": "Add quick"})]),
    ]
    summary = run_in_process(config, ScriptedModel(script))
    slow, quick = summary.tasks
    assert (slow.status, quick.status) == ("timed_out", "committed")
    assert slow.reason.startswith("--task-timeout 10s: stopped at ")
    (commit,) = git.Repo(repo).iter_commits(f"main..{slow.branch}")
    assert list(commit.stats.files) == ["pkg/slow.py"]
