"""Bad input and faults across nights, from the command line: a task record that does not parse is rebuilt and kept
beside it (never a crash), a branch the user changed by hand is left alone and said so, and two tasks whose names
make one branch name get two branches that keep their names."""

from __future__ import annotations

import pytest

from support.nights import SCRIPTS, T2, T3, NightState, after_first_night, first_night
from support.repos import git

UNITS = "refactor-agent/nightly/add-a-units-module"
# The slug keeps 40 characters: both are refactor-agent/nightly/add-a-units-module-to-the-package-versio.
ONE, TWO = "Add a units module to the package, version one", "Add a units module to the package, version two"
ONE_NAME = NightState(tasks=(ONE, TWO), scripts={ONE: SCRIPTS[T3], TWO: SCRIPTS[T2]})


@pytest.mark.started_at_collection(first_night((T3,)))
def test_a_record_that_does_not_parse_is_rebuilt_the_old_one_kept_beside_and_the_night_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fixture = after_first_night(monkeypatch, (T3,))
    (path,) = (fixture.runs / ".tasks").glob("*.json")
    path.write_text('{"version": 1, "tasks": {')  # cut short
    tip = fixture.branches()[UNITS]

    plan = fixture.night("--plan", tasks=(T3,))
    assert plan.exit_code == 0, plan.output
    assert [line for line in plan.output.splitlines() if "did not parse" in line] == [
        f"task record {path} did not parse (JSONDecodeError): read as rebuilt from 1 branch; --plan writes nothing "
        "(the night will rebuild it and keep the old file beside it)"
    ]
    assert sorted(path.parent.glob(f"{path.name}*")) == [path]  # nothing kept beside: the plan wrote nothing
    assert path.read_text() == '{"version": 1, "tasks": {'

    second = fixture.night(tasks=(T3,))
    assert second.exit_code == 0, second.output
    said = [line for line in second.output.splitlines() if "did not parse" in line]
    (kept,) = path.parent.glob(f"{path.name}.unreadable-*")
    assert said == [  # once, not once per read
        f"task record {path} did not parse (JSONDecodeError): rebuilt from 1 branch; "
        f"the old file is kept as {kept.name}"
    ]
    assert kept.read_text() == '{"version": 1, "tasks": {'
    assert second.requests == []  # rebuilt from the branch's trailers: the task is current, nothing to redo
    assert fixture.branches() == {UNITS: tip}
    assert fixture.fates() == {T3: "waiting"}


@pytest.mark.started_at_collection(first_night((T3,)))
def test_a_branch_changed_by_hand_is_left_alone_and_said_so(monkeypatch: pytest.MonkeyPatch) -> None:
    fixture = after_first_night(monkeypatch, (T3,))
    left = fixture.branches()[UNITS]
    git(fixture.repo, "checkout", "-q", UNITS)  # a reviewer's fix on the branch
    (fixture.repo / "pkg/units.py").write_text('UNIT = "metre"\n')
    git(fixture.repo, "commit", "-q", "-am", "Spell the unit out")
    git(fixture.repo, "checkout", "-q", "main")
    theirs = fixture.branches()[UNITS]
    (fixture.repo / "NEWS").write_text("main moved\n")  # a stale task would be rebased otherwise
    git(fixture.repo, "add", ".")
    git(fixture.repo, "commit", "-q", "-m", "News")

    second = fixture.night(tasks=(T3,))
    assert second.exit_code == 0, second.output
    (line,) = [line for line in second.output.splitlines() if UNITS in line]
    assert line.split() == [
        "leave",
        UNITS,
        *f"changed outside refactor-agent (at {theirs[:12]}, not the {left[:12]} it left): left alone".split(),
    ]
    assert second.requests == []
    assert fixture.branches() == {UNITS: theirs}  # not overwritten, not rebased
    assert fixture.fates() == {T3: "outside"}


@pytest.mark.started_at_collection(ONE_NAME)
def test_two_tasks_that_make_one_branch_name_get_two_branches_that_keep_their_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fixture, (first,) = ONE_NAME.made(monkeypatch)
    assert first.exit_code == 0, first.output
    branches = fixture.branches()
    named = "refactor-agent/nightly/add-a-units-module-to-the-package-versio"
    assert len(branches) == 2 and named in branches
    (other,) = set(branches) - {named}
    assert other.startswith(f"{named}-")
    files = {branch: git(fixture.repo, "diff", "--name-only", "main", branch).split() for branch in branches}
    assert sorted(files.values()) == [["pkg/perimeter.py"], ["pkg/units.py"]]  # each task's own work

    (fixture.repo / "NEWS").write_text("main moved\n")
    git(fixture.repo, "add", ".")
    git(fixture.repo, "commit", "-q", "-m", "News")
    second = fixture.night(tasks=(TWO, ONE), scripts=ONE_NAME.scripts)  # the order changed too
    assert second.exit_code == 0, second.output
    assert sorted(fixture.branches()) == sorted(branches)  # rebased in place: the same two names
    after = {branch: git(fixture.repo, "diff", "--name-only", "main", branch).split() for branch in branches}
    assert after == files
