"""The fleet's pool (which server a task goes to) and a task's model moving off a server that died."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest

from agent.dispatch.seats import FleetModel, NoServerLeft, ServerPool, prefix_digest
from agent.protocol.config import LLMConfig
from agent.protocol.events import Retry, TaskServer

from support.early import BACKGROUND, started_early
from support.limits import on_stack
from support.scripted_server import Die, Reply, ScriptedServer

A, B, C = "http://a:1/v1", "http://b:1/v1", "http://c:1/v1"
SYSTEM = [{"role": "system", "content": "instructions + repository"}]


def _take(pool: ServerPool, digest: str | None, saved_on: frozenset[str] = frozenset()) -> tuple[str, int, str]:
    seat, why = pool.acquire(digest, saved_on)
    return seat.url, seat.slot, why


def test_a_task_goes_to_the_free_server_that_holds_its_prefix_else_to_the_least_loaded() -> None:
    pool = ServerPool([A, B, C])
    first, _ = pool.acquire("commit-1")
    second, _ = pool.acquire("commit-2")
    assert (first.url, second.url) == (A, B)
    pool.release(first)
    pool.release(second)
    assert _take(pool, "commit-2") == (B, 0, "holds the task's prefix")
    assert _take(pool, "commit-1") == (A, 0, "holds the task's prefix")
    assert _take(pool, "commit-1") == (C, 0, "least loaded"), "the holder is busy: an idle server beats waiting"


def test_a_server_with_the_prefix_saved_comes_before_the_least_loaded() -> None:
    pool = ServerPool([A, B, C])
    pool.acquire("other")
    assert _take(pool, "commit-1", saved_on=frozenset({A, C})) == (C, 0, "has the prefix saved"), "A is busy"
    assert _take(pool, "commit-2", saved_on=frozenset()) == (B, 0, "least loaded")


def test_with_slots_tasks_spread_over_the_servers_first_and_a_slot_keeps_its_prefix() -> None:
    pool = ServerPool([A, B], slots_per_server=2)
    assert pool.size == 4
    seats = [pool.acquire(f"commit-{n}")[0] for n in range(4)]
    assert [(seat.url, seat.slot) for seat in seats] == [(A, 0), (B, 0), (A, 1), (B, 1)], "least loaded server first"
    pool.release(seats[2])
    pool.release(seats[0])
    assert _take(pool, "commit-2") == (A, 1, "holds the task's prefix"), "the slot that served it, not just its server"


class Looks:
    """Counts a pool's looks for a free seat (each begins with check_stop), so that a test can wait until a task
    waiting for a seat has looked at the pool as it is now, instead of for a time it surely took to."""

    def __init__(self, pool: ServerPool) -> None:
        self.count = 0
        check_stop = pool.check_stop

        def counted() -> None:
            self.count += 1
            check_stop()

        pool.check_stop = counted  # type: ignore[method-assign]

    def wait_for_one_after(self, seen: int, waiter: threading.Thread) -> None:
        """Returns once the waiter has looked (again) since `seen` looks were counted and waits once more, or has
        ended. Counted after a change of the pool (under its lock, as the looks are): a look at the changed pool."""
        deadline = time.monotonic() + 30
        while waiter.is_alive() and not (self.count > seen and on_stack(waiter.ident, threading.Condition.wait)):
            assert time.monotonic() < deadline, "the waiter never looked again"
            time.sleep(0.002)


def test_a_task_waits_for_a_free_slot_and_a_dead_server_is_out_of_rotation() -> None:
    pool = ServerPool([A, B], slots_per_server=2)
    taken = [pool.acquire(None)[0] for _ in range(4)]
    looks = Looks(pool)
    got: list[tuple[str, int, str]] = []
    waiter = threading.Thread(target=lambda: got.append(_take(pool, None)))
    waiter.start()
    looks.wait_for_one_after(0, waiter)
    assert waiter.is_alive() and not got, "every slot is taken: the fifth task waits"
    pool.take_out(A, "connection refused")
    for seat in taken:
        if seat.url == A:
            pool.release(seat)
    looks.wait_for_one_after(looks.count, waiter)
    assert waiter.is_alive(), "a freed slot on a dead server is no slot, none of its slots"
    pool.release(next(seat for seat in taken if seat.url == B))
    waiter.join(10)
    assert got == [(B, 0, "least loaded")]
    assert pool.live() == [B] and pool.taken_out() == {A: "connection refused"}
    pool.take_out(B, "HTTP 500")
    with pytest.raises(NoServerLeft, match=r"a:1.*connection refused.*b:1.*HTTP 500"):
        pool.acquire(None)


def test_the_prefix_is_the_system_message_and_tools_not_the_conversation() -> None:
    tools = [{"type": "function", "function": {"name": "finish"}}]
    first = prefix_digest([*SYSTEM, {"role": "user", "content": "task 1"}], tools)
    assert first == prefix_digest([*SYSTEM, {"role": "user", "content": "task 2"}], tools)
    assert first != prefix_digest([{"role": "system", "content": "another commit"}], tools)
    assert first != prefix_digest(SYSTEM, [])


def test_a_conversation_continues_on_another_server_when_its_server_dies() -> None:
    config = LLMConfig(max_retries=1, retry_backoff_s=0.1, idle_timeout_s=10)
    turn_2 = Reply(tool_calls=[("finish", {"summary": "done"})])
    with ScriptedServer([Reply(content="turn 1"), Die()]) as dying, ScriptedServer([turn_2]) as healthy:
        pool = ServerPool([dying.url, healthy.url])
        events: list = []
        model = FleetModel(pool, config.model_copy(update={"servers": [dying.url, healthy.url]}), emit=events.append)
        history = [*SYSTEM, {"role": "user", "content": "the task"}]
        assert model.complete(history, []).content == "turn 1"
        history += [{"role": "assistant", "content": "turn 1"}, {"role": "user", "content": "go on"}]
        reply = model.complete(history, [])
        assert [call.name for call in reply.tool_calls] == ["finish"]
        assert model.server == healthy.url
        assert healthy.requests[0]["messages"] == history, "the whole conversation, resent where it continues"
        assert pool.live() == [healthy.url] and dying.url in pool.taken_out()
        moves = [event for event in events if isinstance(event, TaskServer)]
        assert [event.server for event in moves] == [dying.url, healthy.url]
        assert moves[1].reason.startswith(f"failover: {dying.url} stopped answering (model server failed 2 times")
        assert any(isinstance(event, Retry) for event in events)
        model.release()
        assert _take(pool, None) == (healthy.url, 0, "least loaded"), "the task's slot was given back"
        assert all(request.get("id_slot") == 0 for request in dying.requests + healthy.requests)


@started_early
def imports_ray() -> Callable[[], bool]:
    """Whether a fresh interpreter imports ray with the single machine's path (a second of CPU, the run's
    machinery): started as collection ends, on the other core."""
    code = (
        "import sys; import agent.cli, agent.run.command, agent.run.run, agent.dispatch.fleet, agent.dispatch.seats; "
        "sys.exit('ray' in sys.modules)"
    )
    process = subprocess.Popen([*BACKGROUND, sys.executable, "-c", code])
    return lambda: process.wait(timeout=600) != 0


def test_the_single_machine_path_never_imports_ray(imports_ray: bool) -> None:
    assert not imports_ray
