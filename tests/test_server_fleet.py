"""The fleet's pool (which server a task goes to) and a task's model moving off a server that died."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from agent.config import LLMConfig
from agent.events import Retry, TaskServer
from agent.server.fleet import FleetModel, NoServerLeft, ServerPool, prefix_digest

from scripted_server import Die, Reply, ScriptedServer

A, B, C = "http://a:1/v1", "http://b:1/v1", "http://c:1/v1"
SYSTEM = [{"role": "system", "content": "instructions + repository"}]


def test_a_task_goes_to_the_free_server_that_holds_its_prefix_else_to_the_least_loaded() -> None:
    pool = ServerPool([A, B, C])
    assert pool.acquire("commit-1") == (A, "least loaded")
    assert pool.acquire("commit-2") == (B, "least loaded")
    pool.release(A)
    pool.release(B)
    assert pool.acquire("commit-2") == (B, "holds the task's prefix")
    assert pool.acquire("commit-1") == (A, "holds the task's prefix")
    assert pool.acquire("commit-1") == (C, "least loaded"), "the holder is busy: an idle server beats waiting"


def test_a_task_waits_for_a_free_slot_and_a_dead_server_is_out_of_rotation() -> None:
    pool = ServerPool([A, B])
    pool.acquire(None)
    pool.acquire(None)
    got: list[tuple[str, str]] = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire(None)))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and not got, "both slots are taken: the third task waits"
    pool.take_out(A, "connection refused")
    pool.release(A)
    waiter.join(0.2)
    assert waiter.is_alive(), "a freed slot on a dead server is no slot"
    pool.release(B)
    waiter.join(10)
    assert got == [(B, "least loaded")]
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
        assert pool.acquire(None) == (healthy.url, "least loaded"), "the task's slot was given back"


def test_the_single_machine_path_never_imports_ray() -> None:
    code = (
        "import sys; import agent.cli, agent.session, agent.runner, agent.fleet_dispatch, agent.server.fleet; "
        "sys.exit('ray' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
