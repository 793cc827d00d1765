"""Processes sharing a server take different slots, wait when all are taken, and a dead process frees its slot."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import agent.server.slot_lock
from agent.server.slot_lock import claim_slot

URL = "http://127.0.0.1:8080/v1"


def _hold_in_another_process(lock_dir: Path, slots: int) -> subprocess.Popen:
    code = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from agent.server.slot_lock import claim_slot
        with claim_slot({URL!r}, {slots}, lock_dir=Path({str(lock_dir)!r})) as slot:
            print(slot, flush=True)
            time.sleep(600)
        """
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "0"
    return holder


def test_a_second_process_takes_the_next_slot_and_a_dead_ones_slot_is_free_again(tmp_path: Path) -> None:
    holder = _hold_in_another_process(tmp_path, 2)
    try:
        with claim_slot(URL, 2, lock_dir=tmp_path) as slot:
            assert slot == 1, "slot 0 is the other process's"
    finally:
        holder.kill()
        holder.wait()
    with claim_slot(URL, 2, lock_dir=tmp_path) as slot:
        assert slot == 0, "the kernel released the killed process's lock"


def test_another_server_has_slots_of_its_own(tmp_path: Path) -> None:
    holder = _hold_in_another_process(tmp_path, 1)
    try:
        with claim_slot("http://127.0.0.1:8081/v1", 1, lock_dir=tmp_path) as slot:
            assert slot == 0
    finally:
        holder.kill()
        holder.wait()


def test_with_every_slot_taken_a_process_waits_for_one(tmp_path: Path) -> None:
    holder = _hold_in_another_process(tmp_path, 1)
    got: list[int] = []
    waits: list[float] = []

    def wait(seconds: float) -> None:  # it looks again soon, and says how often it did
        waits.append(seconds)
        time.sleep(0.01)

    def claim() -> None:
        with claim_slot(URL, 1, lock_dir=tmp_path, sleep=wait) as slot:
            got.append(slot)

    waiter = threading.Thread(target=claim)
    try:
        waiter.start()
        deadline = time.monotonic() + 30
        while len(waits) < 3 and waiter.is_alive() and time.monotonic() < deadline:
            time.sleep(0.005)
        assert waiter.is_alive() and not got, "the only slot is taken: it waits"
        assert waits[:3] == [agent.server.slot_lock.POLL_S] * 3, "looking again after each POLL_S"
    finally:
        holder.kill()
        holder.wait()
    waiter.join(30)
    assert got == [0]
