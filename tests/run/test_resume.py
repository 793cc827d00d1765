"""kill -9 at any point, then `refactor-agent resume`: no task lost, none done twice, the task in flight goes on
from its last completed step with its conversation rebuilt (the real CLI as a process for each kill, the resume in
this process; real git, a scripted server, sandboxes on this machine: support/local_cli.py; the same kill in the
real Docker sandbox is
tests/run/test_run_e2e.py::test_a_task_killed_after_three_tool_calls_in_the_docker_sandboxes_goes_on_with_them)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import git
import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.protocol.events import Request, TaskStart
from agent.record.journal import run_directories
from agent.record.progress import CUT_OFF_RESULT, RESTARTED_MESSAGE, read_progress
from agent.worktree.workspace import WIP_REF_PREFIX

from support.cli_runs import LOCAL_AGENT, cli_command, transcript_of, wait_for
from support.killed_runs import (
    AFTER_ONE_STEP,
    AFTER_THREE_STEPS,
    FINISH,
    FINISH_PERIMETER,
    IN_A_COMMAND,
    IN_A_REPAIR_ROUND,
    IN_THE_SECOND_TASK,
    local_cli_here,
    resume,
    resume_command,
    start_killable,
    wip_refs,
)
from support.repos import make_repo
from support.scripted_server import Hold, Reply, ScriptedServer


@pytest.mark.killed
@pytest.mark.started_at_collection(AFTER_THREE_STEPS)
@pytest.mark.parametrize("reboot", [False, True], ids=["killed", "rebooted"])
def test_a_task_killed_after_three_tool_calls_goes_on_with_them_and_keeps_their_files(reboot: bool) -> None:
    killed = AFTER_THREE_STEPS.made()
    root, repo, run_dir, before_kill = killed.root, killed.repo, killed.run_dir, killed.requests
    assert wip_refs(repo)  # the files after each tool call, in the user's repository
    if reboot:  # a reboot empties the temporary directory, where the worktree was
        shutil.rmtree(root / "scratch")

    done, after = resume(root, run_dir, [FINISH])
    assert done.returncode == 0, done.stdout
    assert "resuming run" in done.stdout
    # What the kill left is said as what it was: the task's worktree; no environment was built (as_is), and the
    # killed run's empty hooks folder is no build's. A reboot took both with the temporary directory.
    swept = [line for line in done.stdout.splitlines() if line.startswith("removed ")]
    worktrees = "removed the worktrees of 1 earlier run that did not finish (their branches are kept)"
    assert swept == ([] if reboot else [worktrees])
    assert not list((root / "scratch").glob("refactor-agent-*-*/owner.json"))  # each swept all the same

    held, first_after = before_kill[-1]["messages"], after[0]["messages"]
    # The conversation as it was (byte for byte: the server's cached prefix still matches), then the restart.
    assert json.dumps(first_after[: len(held)]) == json.dumps(held)
    assert first_after[len(held)] == {"role": "user", "content": RESTARTED_MESSAGE}
    calls = [call["function"]["name"] for m in first_after if m["role"] == "assistant" for call in m["tool_calls"]]
    assert calls == ["create_file", "create_file", "bash"]
    results = [m["content"] for m in first_after if m["role"] == "tool"]
    assert len(results) == 3 and "wrote three" in results[2]

    summary = json.loads((run_dir / "summary.json").read_text())
    (task,) = summary["tasks"]
    assert (summary["status"], summary["resumed"], task["status"]) == ("completed", 1, "committed")
    (commit,) = git.Repo(repo).iter_commits(f"main..{task['branch']}")
    assert sorted(commit.stats.files) == ["pkg/one.py", "pkg/two.py", "three.txt"]
    assert wip_refs(repo) == []  # settled: its snapshots are gone
    report = (run_dir / "report.md").read_text()
    assert "Add one, two and three" in report


@pytest.mark.killed
@pytest.mark.started_at_collection(AFTER_THREE_STEPS)
def test_a_run_killed_again_after_resuming_goes_on_with_both_sessions() -> None:
    killed = AFTER_THREE_STEPS.made()
    root, repo, run_dir = killed.root, killed.repo, killed.run_dir
    four = Reply(tool_calls=[("create_file", {"path": "pkg/four.py", "content": "FOUR = 4\n"})])
    with ScriptedServer([four, Hold()]) as server:
        process = start_killable(resume_command(run_dir, server), root / "scratch")
        try:
            wait_for(server.held, "the second session's held request")
        finally:
            process.kill()
            process.wait(timeout=60)
        held = server.requests[-1]["messages"]

    done, after = resume(root, run_dir, [FINISH])
    assert done.returncode == 0, done.stdout
    messages = after[0]["messages"]
    assert json.dumps(messages[: len(held)]) == json.dumps(held)  # both sessions' conversation, unchanged
    assert [m["content"] for m in messages if m["role"] == "user"].count(RESTARTED_MESSAGE) == 2
    (task,) = json.loads((run_dir / "summary.json").read_text())["tasks"]
    (commit,) = git.Repo(repo).iter_commits(f"main..{task['branch']}")
    assert sorted(commit.stats.files) == ["pkg/four.py", "pkg/one.py", "pkg/two.py", "three.txt"]


@pytest.mark.killed
@pytest.mark.started_at_collection(IN_A_COMMAND)
def test_a_tool_call_cut_off_by_the_kill_is_reported_as_interrupted_and_never_run_again() -> None:
    killed = IN_A_COMMAND.made()  # in `sleep 300 && touch slept.txt`, after a first tool call
    repo, run_dir = killed.repo, killed.run_dir

    done, after = resume(killed.root, run_dir, [FINISH])
    assert done.returncode == 0, done.stdout
    messages = after[0]["messages"]
    cut_off = [m for m in messages if m["role"] == "tool" and m["content"] == CUT_OFF_RESULT]
    assert len(cut_off) == 1 and messages[-1]["content"] == RESTARTED_MESSAGE
    sleeps = [e for e in transcript_of(run_dir) if e["type"] == "tool_call" and "sleep 300" in e["arguments"]]
    assert len(sleeps) == 1  # asked for once, run once (cut off), never again
    (task,) = json.loads((run_dir / "summary.json").read_text())["tasks"]
    (commit,) = git.Repo(repo).iter_commits(f"main..{task['branch']}")
    assert list(commit.stats.files) == ["pkg/one.py"]


@pytest.mark.killed
@pytest.mark.started_at_collection(IN_THE_SECOND_TASK)
def test_a_finished_task_is_not_redone_and_the_next_one_goes_on() -> None:
    killed = IN_THE_SECOND_TASK.made()  # the first task finished, the second after one tool call
    repo, run_dir, before_kill = killed.repo, killed.run_dir, killed.requests
    assert len(before_kill) == 4
    # As a kill between the first task's record and the deletion of its snapshots would leave it:
    git.Repo(repo).git.update_ref(f"{WIP_REF_PREFIX}{run_dir.name}/1", "main")

    done, after = resume(killed.root, run_dir, [FINISH])
    assert done.returncode == 0, done.stdout
    assert len(after) == 1  # only the second task's next request: the first is not asked again
    summary = json.loads((run_dir / "summary.json").read_text())
    first, second = summary["tasks"]
    assert (first["index"], first["status"], second["index"], second["status"]) == (1, "committed", 2, "committed")
    starts = [e for e in transcript_of(run_dir) if e["type"] == "task_start"]
    assert [(e["task"], e["resumed"]) for e in starts] == [(1, False), (2, False), (2, True)]
    assert wip_refs(repo) == []
    for task, files in ((first, ["pkg/one.py"]), (second, ["pkg/two.py"])):
        (commit,) = git.Repo(repo).iter_commits(f"main..{task['branch']}")
        assert list(commit.stats.files) == files


@pytest.mark.killed
@pytest.mark.started_at_collection(AFTER_ONE_STEP)
def test_a_task_whose_commit_landed_before_the_kill_is_recorded_not_done_twice() -> None:
    one_step_killed = AFTER_ONE_STEP.made()
    root, repo, run_dir = one_step_killed.root, one_step_killed.repo, one_step_killed.run_dir
    # What a kill between the commit and the task's record leaves: the branch holds the task's commit.
    branch = next(e["branch"] for e in transcript_of(run_dir) if e["type"] == "task_start")
    user = git.Repo(repo)
    tree = user.git.rev_parse(f"{next(iter(wip_refs(repo)))}^{{tree}}")
    trailer = "Refactor-Agent-Verdict: verified"
    commit = user.git.commit_tree(tree, "-p", "main", "-m", f"Add one\n\n{trailer}")
    user.git.update_ref(f"refs/heads/{branch}", commit)

    done, after = resume(root, run_dir, [FINISH])
    assert done.returncode == 0, done.stdout
    assert after == []  # the model is not asked again
    (task,) = json.loads((run_dir / "summary.json").read_text())["tasks"]
    assert (task["status"], task["verdict"], task["commit"]) == ("committed", "verified", commit)
    assert [c.hexsha for c in user.iter_commits(f"main..{branch}")] == [commit]
    assert "+ONE = 1" in (run_dir / "patch.diff").read_text()  # its patch, which the kill came before


def test_a_finished_run_cannot_be_resumed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    with ScriptedServer([FINISH]) as server:
        done = local_cli_here(cli_command(repo, server, tmp_path / "runs", "x", cli=LOCAL_AGENT), tmp_path / "scratch")
        assert done.returncode == 0, done.stdout
    (run_dir,) = run_directories(tmp_path / "runs")
    done, _ = resume(tmp_path, run_dir, [])
    assert (done.returncode, done.stdout) == (2, f"error: run {run_dir.name} is completed: nothing to resume\n")


@pytest.mark.killed
@pytest.mark.started_at_collection(AFTER_ONE_STEP)
def test_run_with_resume_picks_up_the_unfinished_run_of_the_same_tasks() -> None:
    one_step_killed = AFTER_ONE_STEP.made()
    root, repo, run_dir = one_step_killed.root, one_step_killed.repo, one_step_killed.run_dir
    with ScriptedServer([FINISH]) as server:
        command = [*cli_command(repo, server, run_dir.parent, "Add one", cli=LOCAL_AGENT), "--resume"]
        done = local_cli_here(command, root / "scratch")
    assert done.returncode == 0, done.stdout
    assert f"resuming run {run_dir.name}" in done.stdout
    assert run_directories(run_dir.parent) == [run_dir]  # the same run, no new one
    (task,) = json.loads((run_dir / "summary.json").read_text())["tasks"]
    assert task["status"] == "committed"


@pytest.mark.killed
@pytest.mark.started_at_collection(AFTER_ONE_STEP)
def test_review_discard_drops_what_an_unfinished_run_kept_for_resume() -> None:
    one_step_killed = AFTER_ONE_STEP.made()
    repo, run_dir = one_step_killed.repo, one_step_killed.run_dir
    assert wip_refs(repo)
    arguments = ["review", "discard", run_dir.name, "--yes", "--runs-dir", str(run_dir.parent)]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    assert wip_refs(repo) == []


def test_every_task_a_fleet_had_in_flight_goes_on_from_its_own_conversation(tmp_path: Path) -> None:
    # A fleet runs tasks in parallel: a kill leaves several started and not finished, each resumed from its own
    # steps (the first of them alone would send the second back to an empty conversation on an existing branch).
    transcript = tmp_path / "transcript.jsonl"
    events = [
        TaskStart(task=1, text="one", branch="refactor-agent/r/1-one", base_commit="a" * 40),
        TaskStart(task=2, text="two", branch="refactor-agent/r/2-two", base_commit="a" * 40),
        Request(task=2, turn=1, message_count=2, new_messages=[{"role": "user", "content": "two"}]),
        Request(task=1, turn=1, message_count=2, new_messages=[{"role": "user", "content": "one"}]),
    ]
    transcript.write_text("".join(event.model_dump_json() + "\n" for event in events))
    progress = read_progress(transcript)
    assert {index: task.messages for index, task in progress.in_flight.items()} == {
        1: [{"role": "user", "content": "one"}],
        2: [{"role": "user", "content": "two"}],
    }


@pytest.mark.killed
@pytest.mark.started_at_collection(IN_A_REPAIR_ROUND)
def test_a_task_killed_in_a_repair_round_goes_on_with_the_files_of_that_rounds_tool_calls() -> None:
    # The gate finds a regression and sends it back; the repair round's first tool call repairs it; the kill comes
    # while the model is asked for the next step. The repaired file must be what the resumed task goes on with.
    killed = IN_A_REPAIR_ROUND.made()
    repo, run_dir, before_kill = killed.repo, killed.run_dir, killed.requests
    users = [m["content"] for m in before_kill[-1]["messages"] if m["role"] == "user"]
    assert "tests/test_geometry.py::test_area" in users[-1]  # the kill came in the repair round

    done, after = resume(killed.root, run_dir, [FINISH_PERIMETER])
    assert done.returncode == 0, done.stdout
    assert len(after) == 1, "the repair held: no further round"
    (task,) = json.loads((run_dir / "summary.json").read_text())["tasks"]
    assert (task["status"], task["verdict"]) == ("committed", "verified")
    geometry = git.Repo(repo).commit(task["branch"]).tree["pkg/geometry.py"].data_stream.read().decode()
    assert "return width * height" in geometry and "def perimeter" in geometry
