"""kill -9 in the middle of a named night, then `resume`: the plan is not made again (plan.json), the task that
finished before the kill is published once and not redone, the one in flight goes on and is published onto its
stable branch: one branch per task, no work branch left, nothing pending in the record."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from agent.record.journal import run_directories

from support.background import State
from support.cli_runs import LOCAL_AGENT, kill_processes_under, wait_for
from support.killed_runs import local_cli_here, resume, start_killable
from support.nights import SCRIPTS, T2, T3
from support.repos import git, made_once, make_repo
from support.scripted_server import Hold, ScriptedServer


def killed_night() -> tuple[Path, Path, Path, Path]:
    """A night of two tasks killed while the second one's model request is held, at a root of its own (its
    scratch folder holds the killed task's checkout), made once and put back as the kill left it for each test:
    the root, the repository, the night file and the run directory."""
    return made_once("killed night", _killed_night, lambda made: made[1])


def _killed_night(root: Path) -> tuple[Path, Path, Path, Path]:
    repo = make_repo(root / "geometry")
    runs = root / "runs"
    night_file = root / "nightly.toml"
    night_file.write_text(
        f'[defaults]\nruns_dir = "{runs}"\ntest_cmd = "python3 -m pytest -q"\n'
        f'[[repo]]\npath = "{repo}"\ntasks = {json.dumps([T3, T2])}\n'
    )
    scratch = root / "scratch"
    with ScriptedServer(scripts={T3: SCRIPTS[T3], T2: [SCRIPTS[T2][0], Hold()]}) as server:
        command = [*LOCAL_AGENT, "night", str(night_file), "--server", server.url]
        process = start_killable(command, scratch)
        try:
            wait_for(server.held, "the second task's held request")
        finally:
            process.kill()
            process.wait(timeout=60)
            kill_processes_under(scratch)
    (run_dir,) = run_directories(runs)
    return root, repo, night_file, run_dir


def branches(repo: Path) -> list[str]:
    return sorted(git(repo, "for-each-ref", "--format=%(refname:strip=2)", "refs/heads/refactor-agent/").split())


@pytest.mark.killed
def test_a_night_killed_mid_task_resumes_onto_its_stable_branches() -> None:
    root, repo, _night_file, run_dir = killed_night()
    runs = run_dir.parent
    plan = json.loads((run_dir / "plan.json").read_text())
    assert [task["action"] for task in plan["repos"][0]["tasks"]] == ["run", "run"]

    done, after = resume(root, run_dir, [SCRIPTS[T2][1]])
    assert done.returncode == 0, done.stdout
    assert all(T3 not in json.dumps(request["messages"]) for request in after)  # finished before: not redone
    listing = branches(repo)
    assert listing == [
        "refactor-agent/nightly/add-a-perimeter-helper",
        "refactor-agent/nightly/add-a-units-module",
    ]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [task["published"] for task in summary["tasks"]] == sorted(listing, reverse=True)
    (record_file,) = (runs / ".tasks").glob("*.json")
    record = json.loads(record_file.read_text())
    assert record["pending"] == []
    assert sorted(task["fate"] for task in record["tasks"].values()) == ["waiting", "waiting"]
    for branch in listing:
        assert git(repo, "rev-parse", f"{branch}^").strip() == git(repo, "rev-parse", "main").strip()


@pytest.mark.killed
def test_the_next_night_supersedes_a_killed_one_and_leaves_one_branch_per_task() -> None:
    root, repo, night_file, killed = killed_night()
    assert f"refactor-agent/{killed.name}/2-add-a-perimeter-helper" in branches(repo)  # the task in flight's

    with ScriptedServer(scripts={T2: SCRIPTS[T2]}) as server:
        command = [*LOCAL_AGENT, "night", str(night_file), "--server", server.url]
        done = local_cli_here(command, root / "scratch")  # not killed: in this process
        output = done.stdout
        asked = [json.dumps(request["messages"]) for request in server.requests]
    assert done.returncode == 0, output
    assert f"run {killed.name} of night nightly did not finish: superseded by this night" in output
    assert all(T3 not in request for request in asked)  # published before the kill: kept, not redone
    assert branches(repo) == [
        "refactor-agent/nightly/add-a-perimeter-helper",
        "refactor-agent/nightly/add-a-units-module",
    ]
    assert git(repo, "for-each-ref", "refs/refactor-agent/wip/") == ""
    done, _after = resume(root, killed, [])
    assert done.returncode == 2
    assert f"run {killed.name} was superseded by night " in done.stdout


def _first_of_a_waiting_suite(root: Path) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """A first night of T3 whose test command waits while `hold` exists (the suite's run on a new base, once the
    test makes it): the repository, the night file and the night's end."""
    repo = make_repo(root / "geometry")
    runs, hold, holding = root / "runs", root / "hold", root / "holding"
    waiter = root / "wait.py"  # the suite waits while `hold` exists: the rebase's baseline on the new base
    waiter.write_text(
        f"import pathlib, time\nhold = pathlib.Path({str(hold)!r})\n"
        f"if hold.exists():\n    pathlib.Path({str(holding)!r}).touch()\n"
        "while hold.exists():\n    time.sleep(0.1)\n"
    )
    night_file = root / "nightly.toml"
    night_file.write_text(
        f'[defaults]\nruns_dir = "{runs}"\ntest_cmd = "python3 {waiter} && python3 -m pytest -q"\n'
        f'[[repo]]\npath = "{repo}"\ntasks = {json.dumps([T3])}\n'
    )
    with ScriptedServer(scripts={T3: SCRIPTS[T3]}) as server:
        first = local_cli_here([*LOCAL_AGENT, "night", str(night_file), "--server", server.url], root / "scratch")
    return repo, night_file, first


WAITING_SUITE = State(_first_of_a_waiting_suite, lambda made: made[0])


@pytest.mark.killed
@pytest.mark.started_at_collection(WAITING_SUITE)
def test_a_kill_during_a_rebase_then_resume_publishes_it_once_asks_no_model_and_sweeps_its_checkout() -> None:
    repo, night_file, first = WAITING_SUITE.made()
    root = repo.parent
    runs, hold, holding, scratch = root / "runs", root / "hold", root / "holding", root / "scratch"
    assert first.returncode == 0, first.stdout
    first_tip = git(repo, "rev-parse", "refactor-agent/nightly/add-a-units-module").strip()
    (repo / "NEWS").write_text("main moved\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "News")
    main = git(repo, "rev-parse", "main").strip()

    hold.touch()
    with ScriptedServer() as server:
        process = start_killable([*LOCAL_AGENT, "night", str(night_file), "--server", server.url], scratch)
        try:
            wait_for(holding.exists, "the rebase's baseline on the new base")
        finally:
            process.kill()
            process.wait(timeout=60)
            kill_processes_under(scratch)
        asked = list(server.requests)
    hold.unlink()
    assert git(repo, "rev-parse", "refactor-agent/nightly/add-a-units-module").strip() == first_tip  # untouched
    _first_run, killed = run_directories(runs)
    (left,) = git(repo, "worktree", "list", "--porcelain").split("\n\n")[1:-1] or [""]  # the rebase's checkout
    assert Path(left.split("\n")[0].removeprefix("worktree ")).is_relative_to(scratch), left

    done, after = resume(root, killed, [])
    assert done.returncode == 0, done.stdout
    assert asked == [] and after == []  # refreshed twice, never by the model
    assert "removed the worktrees of 1 earlier run that did not finish" in done.stdout, done.stdout
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1  # the user's checkout alone
    assert list(scratch.glob("refactor-agent-*")) == []  # the killed rebase's checkout swept, nothing left
    assert branches(repo) == ["refactor-agent/nightly/add-a-units-module"]  # one branch, no work branch
    assert git(repo, "rev-parse", "refactor-agent/nightly/add-a-units-module^").strip() == main
    history = git(repo, "for-each-ref", "--format=%(refname)", "refs/refactor-agent/history/").split()
    assert len(history) == 2 and history[-1].endswith(f"/{killed.name}")  # published once, by the resumed run
    (record_file,) = (runs / ".tasks").glob("*.json")
    assert json.loads(record_file.read_text())["pending"] == []
