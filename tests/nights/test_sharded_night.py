"""A sharded night task on a fixture with three directories: one branch per directory, each its own task (key,
gate, fate); `max_open` lets only that many wait for review and plans the rest on a later night; a shard's work
outside its directory fails the task."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.nights import NightState, night_fixture
from support.repos import SAMPLE_FILES, git
from support.scripted_server import Reply

TASK = "Rename OLD to NEW"
DIRECTORIES = ("alpha", "beta", "gamma")
FILES = {**SAMPLE_FILES, **{f"{directory}/m.py": "OLD = 1\n" for directory in DIRECTORIES}}
BRANCHES = {directory: f"refactor-agent/nightly/rename-old-to-new-{directory}" for directory in DIRECTORIES}


def _rename(directory: str, *also: str) -> list[Reply]:
    edits = [(f"{place}/m.py") for place in (directory, *also)]
    return [
        *(Reply(tool_calls=[("str_replace", {"path": path, "old": "OLD", "new": "NEW"})]) for path in edits),
        *(Reply(tool_calls=[("finish", {"summary": TASK})]) for _ in range(3)),  # the ledger's reminder, a repair
    ]


SCRIPTS = {f"Only change files under {directory}/.": _rename(directory) for directory in DIRECTORIES}


def _table(**extra: object) -> str:
    lines = [f"{key} = {value}" for key, value in extra.items()]
    return "\n".join(
        ["[[repo.task]]", f'text = "{TASK}"', 'shard_by = "directory"', 'shard_contains = "OLD = 1"', *lines, ""]
    )


# The plan, then the first night, of the sharded task without a cap and with max_open = 2.
CAPPED = {
    max_open: NightState(
        nights=(("--plan",), ()),
        scripts=SCRIPTS,
        tables=_table(**({"max_open": max_open} if max_open is not None else {})),
        files=FILES,
    )
    for max_open in (None, 2)
}


@pytest.mark.parametrize(
    "max_open",
    [
        pytest.param(cap, id=f"max_open {cap}" if cap else "no cap", marks=pytest.mark.started_at_collection(state))
        for cap, state in CAPPED.items()
    ],
)
def test_three_directories_make_three_branches_and_max_open_two_of_them(
    monkeypatch: pytest.MonkeyPatch, max_open: int | None
) -> None:
    fixture, (plan, first) = CAPPED[max_open].made(monkeypatch)
    tables = CAPPED[max_open].tables
    base = git(fixture.repo, "rev-parse", "main").strip()
    assert git(fixture.repo, "rev-list", "--count", base).strip() == "1"  # where the nights found it: the sample's

    assert plan.exit_code == 0, plan.output
    decisions = {line.split()[1]: line.split()[0] for line in plan.output.splitlines()[1:4]}
    waiting = {"gamma"} if max_open == 2 else set()
    assert decisions == {BRANCHES[name]: "wait" if name in waiting else "run" for name in DIRECTORIES}
    if max_open == 2:
        assert "max_open = 2: 2 of its shards are open" in plan.output

    assert first.exit_code == 0, first.output
    running = [name for name in DIRECTORIES if name not in waiting]
    assert sorted(fixture.branches()) == sorted(BRANCHES[name] for name in running)
    for name in running:  # each shard its own branch, one commit on the base, changing its directory only
        branch = BRANCHES[name]
        assert git(fixture.repo, "rev-parse", f"{branch}^").strip() == base
        assert git(fixture.repo, "diff", "--name-only", base, branch).split() == [f"{name}/m.py"]
    assert [first.asked(f"under {name}/.") for name in DIRECTORIES] == [name in running for name in DIRECTORIES]
    record = fixture.record()["tasks"]
    assert len(record) == 3
    assert all("#" in key and key.split("#")[0].startswith("nightly/t-") for key in record)
    fates = {task["shard"]: task["fate"] for task in record.values()}
    assert fates == {f"{name}/": "queued" if name in waiting else "waiting" for name in DIRECTORIES}
    keys = {task["shard"]: key for key, task in record.items()}
    trailer = git(fixture.repo, "log", "-1", "--format=%B", BRANCHES["alpha"])
    assert f"Refactor-Agent-Task: {keys['alpha/']}" in trailer

    if max_open != 2:
        return
    # alpha is merged: its place is free, and gamma runs the next night; beta, still waiting, is kept.
    git(fixture.repo, "merge", "-q", "--ff-only", BRANCHES["alpha"])
    second = fixture.night(scripts=SCRIPTS, tables=tables)
    assert second.exit_code == 0, second.output
    assert "retire  " + BRANCHES["alpha"] in second.output
    assert [second.asked(f"under {name}/.") for name in DIRECTORIES] == [False, False, True]
    assert sorted(fixture.branches()) == sorted(BRANCHES.values())
    fates = {task["shard"]: task["fate"] for task in fixture.record()["tasks"].values()}
    assert fates == {"alpha/": "merged", "beta/": "waiting", "gamma/": "waiting"}


# A night whose beta shard changes gamma's file too.
OUTSIDE = NightState(
    scripts={**SCRIPTS, "Only change files under beta/.": _rename("beta", "gamma")},
    tables=_table(repair_rounds=1),
    files=FILES,
)


@pytest.mark.started_at_collection(OUTSIDE)
def test_a_shards_work_outside_its_directory_fails_the_task_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    fixture, (night,) = OUTSIDE.made(monkeypatch)
    reason = "the work changed 1 file outside the shard beta/ (gamma/m.py): Only change files under beta/."
    assert f"task 2 failed: {reason}" in night.output.splitlines()
    assert sorted(fixture.branches()) == sorted([BRANCHES["alpha"], BRANCHES["gamma"]])
    beta = next(task for task in fixture.record()["tasks"].values() if task["shard"] == "beta/")
    assert (beta["status"], beta["fate"]) == ("failed", "failing")
    assert beta["outcomes"][-1]["reason"] == reason
    assert "repair round 1: changed 1 file outside the shard beta/ (gamma/m.py)" in night.output  # told first


def test_a_task_without_shards_tonight_is_one_line_of_the_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fixture = night_fixture(tmp_path, monkeypatch, FILES)
    tables = (
        '[[repo.task]]\ntext = "By owners"\nshard_by = "codeowners"\n'
        '[[repo.task]]\ntext = "Nowhere"\nshard_by = "directory"\nshard_contains = "not in any file"\n'
    )
    plan = fixture.night("--plan", scripts=SCRIPTS, tables=tables)
    assert plan.exit_code == 0, plan.output
    base = git(fixture.repo, "rev-parse", "main").strip()[:12]
    assert plan.output.splitlines()[1:] == [
        "  skip    refactor-agent/nightly/by-owners  its shards could not be read at main "
        f"({base}): no CODEOWNERS file (.github/CODEOWNERS, CODEOWNERS, docs/CODEOWNERS)",
        "  skip    refactor-agent/nightly/nowhere    no shards: no directory 1 level down holds a file that contains "
        "'not in any file'",
        "night nightly: 2 skipped; --plan: nothing ran, nothing was fetched",
    ]


# A first night of a task sharded by code owners.
OWNERS = NightState(
    scripts={
        "code owners in CODEOWNERS are @a ": _rename("alpha"),
        "code owners in CODEOWNERS are @b @c ": _rename("beta"),
    },
    tables='[[repo.task]]\ntext = "By owners"\nshard_by = "codeowners"\n',
    files={**FILES, "CODEOWNERS": "/alpha/ @a\n/beta/ @b @c\n"},
)


@pytest.mark.started_at_collection(OWNERS)
def test_codeowners_shards_and_a_night_that_cannot_read_them_keeps_them(monkeypatch: pytest.MonkeyPatch) -> None:
    fixture, (first,) = OWNERS.made(monkeypatch)
    assert first.exit_code == 0, first.output
    branches = {"@a": "refactor-agent/nightly/by-owners-a", "@b @c": "refactor-agent/nightly/by-owners-b-c"}
    assert sorted(fixture.branches()) == sorted(branches.values())
    base = git(fixture.repo, "rev-parse", "main").strip()
    assert git(fixture.repo, "diff", "--name-only", base, branches["@b @c"]).split() == ["beta/m.py"]
    assert {task["shard"]: task["fate"] for task in fixture.record()["tasks"].values()} == {
        "@a": "waiting",
        "@b @c": "waiting",
    }

    git(fixture.repo, "rm", "-q", "CODEOWNERS")
    git(fixture.repo, "commit", "-q", "-m", "no owners")
    plan = fixture.night("--plan", scripts=OWNERS.scripts, tables=OWNERS.tables)
    assert plan.exit_code == 0, plan.output
    lines = plan.output.splitlines()[1:3]
    assert [line.split()[:2] for line in lines] == [["skip", branches["@a"]], ["skip", branches["@b @c"]]]
    assert all("its shards could not be read at main" in line and "no CODEOWNERS file" in line for line in lines)
