"""The decision per task at a night's start: each row of the table (agent/nights/decide.py), first match wins."""

from __future__ import annotations

import pytest

from agent.nights.decide import Merge, TaskFacts, decide, wait_for_places
from agent.nights.default_branch import DefaultBranch
from agent.protocol.config import TaskSpec
from agent.protocol.nights import Fingerprint, NightOutcome, TaskRecord

D_OLD, D_NEW, TIP = "a" * 40, "b" * 40, "c" * 40
PRINT = Fingerprint(model="m", effort="max")
SPEC = TaskSpec(text="Add a units module")


def record(**fields: object) -> TaskRecord:
    values: dict = {
        "key": "nightly/t-1",
        "text": SPEC.text,
        "kind": "other",
        "branch": "refactor-agent/nightly/add-a-units-module",
        "fingerprint": PRINT,
        "fate": "waiting",
        "tip": TIP,
        "base": D_OLD,
        "status": "committed",
        "verdict": "verified",
        "first_run": "r1",
        "last_run": "r1",
    }
    return TaskRecord.model_validate({**values, **fields})


def facts(**fields: object) -> TaskFacts:
    values: dict = {
        "spec": SPEC,
        "record": record(),
        "fingerprint": PRINT,
        "tip": TIP,
        "checked_out": None,
        "default": DefaultBranch("main", "refs/heads/main", D_NEW, "checked out"),
        "merged": None,
        "conflicts": [],
    }
    return TaskFacts(**{**values, **fields})


ROWS = [
    ("1 archived", facts(spec=None), "archive", "no longer in the night file: branch kept, never updated"),
    (
        "1 a merged shard its task no longer has",
        facts(spec=None, merged=Merge("ancestor")),
        "retire",
        "merged: its commit is in main",
    ),
    ("2 new", facts(record=None, tip=None), "run", "new task"),
    ("2 queued", facts(record=record(fate="queued", tip=None), tip=None), "run", "waited for max_open last night"),
    ("3 merged", facts(merged=Merge("patch_id", D_NEW)), "retire", f"merged: the same patch is in main ({D_NEW[:12]})"),
    (
        "4 merged, repeat",
        facts(spec=SPEC.model_copy(update={"repeat": True}), merged=Merge("ancestor")),
        "run",
        f"merged; repeat = true: runs again on {D_NEW[:12]}",
    ),
    (
        "5 moved by hand",
        facts(tip="d" * 40),
        "leave",
        f"changed outside refactor-agent (at {'d' * 12}, not the {TIP[:12]} it left): left alone",
    ),
    ("6 checked out", facts(checked_out="/home/u/wt"), "leave", "checked out in /home/u/wt: left alone"),
    (
        "7 discarded",
        facts(record=record(fate="discarded", discarded_at="2026-12-02T08:00:00+00:00")),
        "skip",
        "discarded by review discard on 2026-12-02",
    ),
    ("7 branch deleted", facts(tip=None), "skip", "discarded: its branch was deleted"),
    (
        "8 settings changed",
        facts(fingerprint=PRINT.model_copy(update={"model": "n"})),
        "run",
        "settings changed: model m → n",
    ),
    (
        "9 failed",
        facts(
            record=record(
                status="failed",
                verdict="failed",
                outcomes=[NightOutcome(run_id="r1", action="run", reason="server lost")],
            )
        ),
        "run",
        "last night failed: server lost",
    ),
    (
        "10 no changes, same base",
        facts(record=record(status="no_changes", tip=None, base=D_NEW), tip=None),
        "keep",
        f"no changes needed at main ({D_NEW[:12]})",
    ),
    (
        "10 no changes, moved",
        facts(record=record(status="no_changes", tip=None), tip=None),
        "run",
        "no changes last night; main moved",
    ),
    ("11 current", facts(record=record(base=D_NEW)), "keep", f"verified on main ({D_NEW[:12]}), settings unchanged"),
    ("12 stale, repeat", facts(spec=SPEC.model_copy(update={"repeat": True})), "run", "main moved; repeat = true"),
    (
        "13 stale, conflicts",
        facts(conflicts=["pkg/geometry.py"]),
        "run",
        f"main moved and conflicts with it (pkg/geometry.py): the model runs again on {D_NEW[:12]}",
    ),
    (
        "14 stale",
        facts(),
        "rebase",
        f"main moved ({D_OLD[:12]} → {D_NEW[:12]}): rebase, run the tests, no model",
    ),
]


@pytest.mark.parametrize(("task", "action", "reason"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_decision_table(task: TaskFacts, action: str, reason: str) -> None:
    assert decide(task) == (action, reason)


def test_only_failed_and_retry_discarded() -> None:
    failed = facts(record=record(status="timed_out", verdict="timed_out"))
    assert decide(failed, only_failed=True)[0] == "run"
    assert decide(facts(), only_failed=True) == ("skip", "not failed last night (--only failed)")
    assert decide(facts(record=None, tip=None), only_failed=True)[0] == "skip"
    assert decide(facts(tip=None), retry_discarded=True) == ("run", "discarded; --retry discarded")


def test_max_open_keeps_the_places_of_open_shards_and_lets_the_rest_wait() -> None:
    waits = ("wait", "max_open = 2: 2 of its shards are open")
    shards = [
        ("keep", "verified", "waiting"),  # holds a place
        ("retire", "merged", "waiting"),  # frees its place
        ("run", "new task", "queued"),
        ("run", "settings changed", "waiting"),  # holds its place, runs whatever the cap
        ("run", "waited for max_open last night", "queued"),
        ("skip", "discarded", "discarded"),
    ]
    assert wait_for_places(shards, 2) == [
        ("keep", "verified"),
        ("retire", "merged"),
        waits,
        ("run", "settings changed"),
        waits,
        ("skip", "discarded"),
    ]
    assert wait_for_places(shards, 3)[2:5] == [
        ("run", "new task"),
        ("run", "settings changed"),
        ("wait", "max_open = 3: 3 of its shards are open"),
    ]
