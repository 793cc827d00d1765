"""`review push` of a named night's stable branch, against a real bare repository as the remote (a file path:
nothing leaves the machine): the branch, replaced by its base plus one commit each night, updates the remote with
--force-with-lease on the tip refactor-agent last pushed, the push is in the task record, and a remote branch
someone else moved is refused in one line with nothing pushed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app

from support.nights import T3, NightFixture, NightState, after_first_night, first_night
from support.repos import git

UNITS = "refactor-agent/nightly/add-a-units-module"


def _push(fixture: NightFixture, code: int = 0) -> str:
    result = CliRunner().invoke(app, ["review", "push", UNITS, "--remote", "origin", "--runs-dir", str(fixture.runs)])
    assert result.exit_code == code, (result.stdout, result.stderr, result.exception)
    return result.stdout if code == 0 else result.stderr


def _add_a_remote(fixture: NightFixture) -> Path:
    """A bare repository of this machine as the fixture's `origin`."""
    remote = fixture.root / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    git(fixture.repo, "remote", "add", "origin", str(remote))
    return remote


def _after_a_night_with_a_remote(monkeypatch: pytest.MonkeyPatch) -> tuple[NightFixture, Path]:
    """The night's fixture with its `origin` after a first night of T3 (the remote's branch not pushed yet)."""
    fixture = after_first_night(monkeypatch, (T3,), before=_add_a_remote)
    return fixture, fixture.root / "remote.git"


# The first night of T3 with an origin (made in the background: support/background.py).
WITH_A_REMOTE = first_night((T3,), _add_a_remote)


def _someones_branch_there(fixture: NightFixture) -> None:
    """An origin that has a branch of the night's name already, someone's (main's commit)."""
    _add_a_remote(fixture)
    git(fixture.repo, "push", "-q", "origin", f"main:refs/heads/{UNITS}")


# The first night of T3 onto such an origin.
ONTO_SOMEONES_BRANCH = NightState(tasks=(T3,), before=_someones_branch_there)


def _move_main(fixture: NightFixture) -> None:
    (fixture.repo / "NEWS").write_text("main moved\n")
    git(fixture.repo, "add", ".")
    git(fixture.repo, "commit", "-q", "-m", "News")


def _remote_tip(remote: Path) -> str:
    return git(remote, "rev-parse", f"refs/heads/{UNITS}").strip()


def _pushed(fixture: NightFixture) -> dict:
    (task,) = fixture.record()["tasks"].values()
    return {remote: push["commit"] for remote, push in task["pushed"].items()}


@pytest.mark.started_at_collection(WITH_A_REMOTE)
def test_a_night_branch_replaced_after_its_push_updates_the_remote_and_one_moved_there_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixture, remote = _after_a_night_with_a_remote(monkeypatch)
    first = fixture.branches()[UNITS]
    assert _push(fixture).strip() == f"pushed {UNITS} ({first[:12]}) to origin"
    assert _remote_tip(remote) == first
    assert _pushed(fixture) == {"origin": first}

    # main moves: the next night replaces the branch by the new base plus one commit, not a fast-forward of first.
    _move_main(fixture)
    assert fixture.night(tasks=(T3,)).exit_code == 0
    second = fixture.branches()[UNITS]
    not_ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", first, second], cwd=fixture.repo, check=False)
    assert not_ancestor.returncode == 1  # a plain push would be refused as no fast-forward
    assert _push(fixture).strip() == f"pushed {UNITS} ({second[:12]}) to origin, replacing {first[:12]}"
    assert _remote_tip(remote) == second
    assert _pushed(fixture) == {"origin": second}

    # Someone else pushes onto the remote branch: the next push is refused, the remote and the record unchanged.
    theirs = tmp_path / "theirs"
    subprocess.run(["git", "clone", "-q", "--branch", UNITS, str(remote), str(theirs)], check=True)
    (theirs / "THEIRS").write_text("a reviewer's fix\n")
    git(theirs, "add", ".")
    git(theirs, "-c", "user.name=R", "-c", "user.email=r@example.com", "commit", "-q", "-m", "Fix")
    git(theirs, "push", "-q", "origin", UNITS)
    moved = _remote_tip(remote)
    record = fixture.record()
    refused = _push(fixture, code=1)
    assert refused.strip() == (
        f"error: not pushed: origin's {UNITS} is not at {second[:12]}, where refactor-agent last pushed it: "
        "someone else moved it (git fetch origin and look)"
    )
    assert _remote_tip(remote) == moved
    assert fixture.record() == record


@pytest.mark.started_at_collection(ONTO_SOMEONES_BRANCH)
def test_a_night_branch_never_pushed_is_not_pushed_over_one_the_remote_already_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fixture, (night,) = ONTO_SOMEONES_BRANCH.made(monkeypatch)
    remote = fixture.root / "remote.git"
    assert night.exit_code == 0
    refused = _push(fixture, code=1)
    assert refused.strip() == (
        f"error: not pushed: origin's {UNITS} exists there, and refactor-agent never pushed it: someone else "
        "moved it (git fetch origin and look)"
    )
    assert _remote_tip(remote) == git(fixture.repo, "rev-parse", "main").strip()
    assert _pushed(fixture) == {}


@pytest.mark.started_at_collection(WITH_A_REMOTE)
def test_a_night_branch_pushed_before_its_record_was_rebuilt_still_updates_the_remote(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A record rebuilt from git keeps no pushes: the remote's branch as git last saw it, a commit of this task, is
    the lease."""
    fixture, remote = _after_a_night_with_a_remote(monkeypatch)
    first = fixture.branches()[UNITS]
    _push(fixture)
    (record,) = (fixture.runs / ".tasks").glob("*.json")
    record.write_text("{")  # rebuilt from the branches by the next night
    _move_main(fixture)
    assert fixture.night(tasks=(T3,)).exit_code == 0
    assert _pushed(fixture) == {}
    second = fixture.branches()[UNITS]
    assert _push(fixture).strip() == f"pushed {UNITS} ({second[:12]}) to origin, replacing {first[:12]}"
    assert _remote_tip(remote) == second and _pushed(fixture) == {"origin": second}
