"""The task record: rebuilt from git when missing or unparsable (the old file kept beside it), refused when a newer
refactor-agent wrote it, never half-written, and every ref move settled from git after a kill -9; the publish is one
transaction that moves nothing when the branch is not where the night left it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.nights.errors import NightError
from agent.nights.history import history_ref
from agent.nights.identity import allocate_branch
from agent.nights.publish import move_branch
from agent.nights.record import RecordStore
from agent.protocol.nights import Fingerprint, PendingMove, TaskRecord, TaskRecordFile
from agent.worktree.safe_git import GitError, SafeGit

from support.repos import git, make_repo

KEY = "nightly/t-1f2e3d4c5b6a"
BRANCH = "refactor-agent/nightly/add-units"
PRINT = Fingerprint(model="m", effort="max")


def fresh(branch: str = BRANCH) -> TaskRecord:
    return TaskRecord(
        key=KEY,
        text="Add units",
        kind="other",
        branch=branch,
        fingerprint=PRINT,
        fate="queued",
        first_run="r2",
        last_run="r2",
    )


def setup(tmp_path: Path) -> tuple[Path, SafeGit, RecordStore, list[str]]:
    repo = make_repo(tmp_path / "repo")
    hooks = tmp_path / "no-hooks"
    hooks.mkdir()
    safe = SafeGit(repo / ".git", repo, hooks)
    lines: list[str] = []
    store = RecordStore(
        tmp_path / "runs", "repo-1", safe, night="nightly", known={KEY: fresh()}, written_by="r2", log=lines.append
    )
    return repo, safe, store, lines


def commit_on(repo: Path, branch: str, message: str) -> str:
    git(repo, "checkout", "-q", "-b", branch)
    (repo / "pkg/units.py").write_text(f"# {message}\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", message)
    tip = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "main")
    return tip


def test_an_unparsable_record_is_rebuilt_from_the_branches_and_kept_beside(tmp_path: Path) -> None:
    repo, _safe, store, lines = setup(tmp_path)
    tip = commit_on(
        repo,
        BRANCH,
        f"Add units\n\nRefactor-Agent-Run: r1\nRefactor-Agent-Verdict: verified\nRefactor-Agent-Task: {KEY}",
    )
    commit_on(repo, "refactor-agent/nightly/foreign", "someone's own")  # no trailer: not ours
    store.directory.mkdir(parents=True)
    store.path.write_text('{"version": 1, "tasks": ')
    record = store.update(lambda _record: None)
    assert list(record.tasks) == [KEY]
    task = record.tasks[KEY]
    assert (task.branch, task.tip, task.fate, task.verdict, task.last_run) == (BRANCH, tip, "waiting", "verified", "r1")
    assert task.base == git(repo, "rev-parse", "main").strip()
    kept = store.path.with_name(store.path.name + ".unreadable-r2")
    assert kept.read_text() == '{"version": 1, "tasks": '
    assert lines == [
        f"task record {store.path} did not parse (JSONDecodeError): rebuilt from 1 branch; "
        f"the old file is kept as {kept.name}"
    ]
    assert TaskRecordFile.model_validate_json(store.path.read_bytes()).tasks[KEY].tip == tip


def test_a_missing_record_rebuilt_from_the_plans_branch_listing_is_the_one_git_would_list(tmp_path: Path) -> None:
    repo, _safe, store, _lines = setup(tmp_path)
    commit_on(repo, BRANCH, f"Add units\n\nRefactor-Agent-Run: r1\nRefactor-Agent-Task: {KEY}")
    commit_on(repo, f"{BRANCH}-2", f"Other\n\nRefactor-Agent-Task: {KEY}-2")
    commit_on(repo, "refactor-agent/nightlyx/add-units", f"Another night's\n\nRefactor-Agent-Task: {KEY}x")
    listed = git(repo, "for-each-ref", "--format=%(refname:lstrip=2) %(objectname)", "refs/heads/").splitlines()
    tips = dict(line.split(" ") for line in listed)
    assert store.load(tips) == store.load()
    assert sorted(store.load(tips).tasks) == [KEY, f"{KEY}-2"]  # the other night's branch is not this night's


def test_an_unparsable_record_read_for_a_plan_is_read_as_rebuilt_and_nothing_is_written(tmp_path: Path) -> None:
    repo, safe, _store, lines = setup(tmp_path)
    tip = commit_on(repo, BRANCH, f"Add units\n\nRefactor-Agent-Run: r1\nRefactor-Agent-Task: {KEY}")
    store = RecordStore(
        tmp_path / "runs",
        "repo-1",
        safe,
        night="nightly",
        known={KEY: fresh()},
        written_by="plan",
        log=lines.append,
        read_only=True,
    )
    store.directory.mkdir(parents=True)
    store.path.write_text('{"version": 1, "tasks": ')
    assert store.load().tasks[KEY].tip == tip
    assert store.load().tasks[KEY].tip == tip
    assert sorted(store.directory.iterdir()) == [store.path]
    assert store.path.read_text() == '{"version": 1, "tasks": '
    assert lines == [  # once
        f"task record {store.path} did not parse (JSONDecodeError): read as rebuilt from 1 branch; --plan writes "
        "nothing (the night will rebuild it and keep the old file beside it)"
    ]


def test_a_record_of_a_newer_version_is_refused_and_left_untouched(tmp_path: Path) -> None:
    _repo, _safe, store, _lines = setup(tmp_path)
    store.directory.mkdir(parents=True)
    store.path.write_text('{"version": 2}')
    with pytest.raises(NightError, match="written by a newer refactor-agent; not rebuilt"):
        store.update(lambda _record: None)
    assert store.path.read_text() == '{"version": 2}'


def test_a_kill_mid_write_leaves_the_old_record(tmp_path: Path) -> None:
    _repo, _safe, store, _lines = setup(tmp_path)
    store.update(lambda record: record.tasks.update({KEY: fresh()}))
    before = store.path.read_bytes()
    child = (
        "import os, sys\n"
        "import agent.record.atomic as atomic\n"
        "real = os.replace\n"
        "os.replace = lambda *args: os._exit(9)\n"  # killed after the temporary file is written, before the rename
        "atomic.write_atomically(__import__('pathlib').Path(sys.argv[1]), b'{}')\n"
    )
    done = subprocess.run([sys.executable, "-c", child, str(store.path)], cwd=Path.cwd(), check=False)
    assert done.returncode == 9
    assert store.path.read_bytes() == before
    assert list(store.directory.glob("*.tmp"))  # the stray is there until the next write
    store.update(lambda _record: None)
    assert not list(store.directory.glob("*.tmp"))
    assert os.stat(store.directory).st_mode & 0o777 == 0o700


@pytest.mark.parametrize("where", ["done", "not_done", "moved_by_hand"])
def test_a_pending_move_is_settled_from_git(tmp_path: Path, where: str) -> None:
    repo, _safe, store, _lines = setup(tmp_path)
    old = commit_on(repo, BRANCH, "night 1")
    new = commit_on(repo, "refactor-agent/r2/1-add-units", "night 2")
    move = PendingMove(
        key=KEY, run_id="r2", branch=BRANCH, old=old, new=new, work_branch=None, history_ref=history_ref(BRANCH, "r2")
    )
    store.update(
        lambda record: (
            record.tasks.update({KEY: fresh().model_copy(update={"tip": old, "fate": "waiting"})}),
            record.pending.append(move),
        )
    )
    if where == "done":
        git(repo, "update-ref", f"refs/heads/{BRANCH}", new)
    elif where == "moved_by_hand":
        git(repo, "update-ref", f"refs/heads/{BRANCH}", git(repo, "rev-parse", "main").strip())
    record = store.load()
    task = record.tasks[KEY]
    assert record.pending == []
    assert (task.tip, task.fate) == {
        "done": (new, "waiting"),
        "not_done": (old, "waiting"),
        "moved_by_hand": (old, "outside"),
    }[where]


def test_a_move_this_process_made_is_settled_as_made_without_asking_git_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, safe, store, _lines = setup(tmp_path)
    old = commit_on(repo, BRANCH, "night 1")
    new = commit_on(repo, "refactor-agent/r2/1-add-units", "night 2")
    store.update(lambda record: record.tasks.update({KEY: fresh().model_copy(update={"tip": old, "fate": "waiting"})}))
    move = PendingMove(key=KEY, run_id="r2", branch=BRANCH, old=old, new=new, work_branch=None, history_ref=None)
    started: list[list[str]] = []
    popen = subprocess.Popen
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a[0]) or popen(*a, **k))
    seen: list[tuple[str | None, str]] = []
    assert move_branch(
        store,
        safe,
        move,
        checked_out={},
        done=lambda record, _moved: seen.append((record.tasks[KEY].tip, record.tasks[KEY].fate)),
    )
    assert [command[-2:] for command in started] == [["update-ref", "--stdin"]]
    assert seen == [(new, "waiting")] and git(repo, "rev-parse", BRANCH).strip() == new


def test_the_publish_is_one_transaction_and_moves_nothing_when_the_branch_moved(tmp_path: Path) -> None:
    repo, safe, store, _lines = setup(tmp_path)
    old = commit_on(repo, BRANCH, "night 1")
    new = commit_on(repo, "refactor-agent/r2/1-add-units", "night 2")
    outcomes: list[bool] = []
    move = PendingMove(
        key=KEY,
        run_id="r2",
        branch=BRANCH,
        old=old,
        new=new,
        work_branch="refactor-agent/r2/1-add-units",
        history_ref=history_ref(BRANCH, "r2"),
    )
    assert move_branch(store, safe, move, checked_out={}, done=lambda _record, moved: outcomes.append(moved))
    assert git(repo, "rev-parse", BRANCH).strip() == new
    assert git(repo, "rev-parse", "refs/refactor-agent/history/nightly/add-units/r2").strip() == new
    assert git(repo, "branch", "--list", "refactor-agent/r2/*") == ""
    assert json.loads(store.path.read_text())["pending"] == []
    # The same move again: the branch is no longer at `old`, so nothing at all moves (no history ref either).
    again = move.model_copy(update={"run_id": "r3", "history_ref": history_ref(BRANCH, "r3"), "work_branch": None})
    assert not move_branch(store, safe, again, checked_out={}, done=lambda _record, moved: outcomes.append(moved))
    with pytest.raises(GitError):
        safe.run("rev-parse", "--verify", "refs/refactor-agent/history/nightly/add-units/r3")
    git(repo, "checkout", "-q", BRANCH)
    assert not move_branch(
        store,
        safe,
        move.model_copy(update={"old": new}),
        checked_out={BRANCH: str(repo)},
        done=lambda _record, moved: outcomes.append(moved),
    )
    assert outcomes == [True, False, False]


def test_two_tasks_with_one_slug_get_distinct_names_that_stay() -> None:
    first = allocate_branch("nightly/t-aaa", "refactor-agent/nightly/x", set())
    second = allocate_branch("nightly/t-bbb", "refactor-agent/nightly/x", {first})
    assert first == "refactor-agent/nightly/x"
    assert second.startswith("refactor-agent/nightly/x-") and len(second) == len(first) + 7
    assert allocate_branch("nightly/t-bbb", "refactor-agent/nightly/x", {first}) == second  # stable
