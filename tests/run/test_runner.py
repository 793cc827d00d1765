"""The runner's stages with the in-process scripted model, sandboxes on this machine (tests/support/local_sandbox.py)
and real git: the gate's verdicts. The real Docker sandbox runs the same stages in tests/run/test_run_e2e.py."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import git
import pytest

from agent.protocol.config import RunConfig
from agent.protocol.model import RetriesExhausted
from agent.protocol.records import RunSummary
from agent.record.reasons import reason_line

from support import background
from support.local_sandbox import LocalSandboxes
from support.repos import BREAK, REPAIR, SAMPLE_FILES, made_at_a_root, make_repo, once_made
from support.scripted_model import ScriptedModel, run_in_process
from support.scripted_server import Reply

AREA_TESTS = ["tests/test_geometry.py::test_area", "tests/test_geometry.py::test_describe"]
GONE = RetriesExhausted("model server failed 2 times, last: APIConnectionError: Connection error.")


def finish(summary: str) -> Reply:
    return Reply(tool_calls=[("finish", {"summary": summary})])


def sample_repo(tmp_path: Path, extra: dict[str, str] | None = None) -> Path:
    known_bug = {"tests/test_known_bug.py": "def test_known_bug():\n    assert 1 + 1 == 3\n"}
    return make_repo(tmp_path / "repo", {**SAMPLE_FILES, **known_bug, **(extra or {})})


def run(
    tmp_path: Path, repo: Path, script: list, tasks: list[str] | None = None, **settings: float | bool
) -> tuple[RunSummary, list, ScriptedModel]:
    model = ScriptedModel(script)
    config = RunConfig(
        repo=repo, tasks=tasks or ["Add perimeter"], runs_dir=tmp_path / "runs", max_turns=10, **settings
    )
    events: list = []
    summary = run_in_process(config, model, observe=events.append, sandboxes=LocalSandboxes(tmp_path))
    return summary, events, model


def trailers(repo: Path, commit: str) -> dict[str, str]:
    message = git.Repo(repo).commit(commit).message
    return dict(line.split(": ", 1) for line in message.splitlines() if line.startswith("Refactor-Agent-"))


@dataclass
class SharedRun:
    """A run at `root` on the sample repository `repo`: its summary, the events it emitted and its model."""

    root: Path
    repo: Path
    summary: RunSummary
    events: list
    model: ScriptedModel


@dataclass(frozen=True, eq=False)
class RunState:
    """A run of `script` on the sample repository (with `extra` files), made once per session at a root of its own
    for the tests that read it (support/repos.py: made_once). A test that marks it
    (@pytest.mark.started_at_collection(state)) has it made in the background as collection ends
    (support/background.py): the run's gates take the other core while the session goes on."""

    script: list
    tasks: tuple[str, ...] = ("Add perimeter",)
    extra: dict[str, str] = field(default_factory=dict)

    def __call__(self) -> tuple[SharedRun, Path, Path]:
        """The run made at a root of its own, the root and its copy (what the background's process makes)."""
        return made_at_a_root(self._run)

    def _run(self, root: Path) -> SharedRun:
        repo = sample_repo(root, self.extra)
        summary, events, model = run(root, repo, self.script, list(self.tasks))
        return SharedRun(root, repo, summary, events, model)

    def made(self) -> SharedRun:
        return once_made(self, lambda: background.made(self), lambda made: made.repo)


REPAIRED = RunState([BREAK, finish("Add perimeter"), REPAIR, finish("Add perimeter")])
# A task whose work regresses two tests and stays broken through both repair rounds: read by the tests of its
# verdict, its commit and its record.
STAYS_BROKEN = RunState([BREAK, finish("Add perimeter"), finish("done"), finish("really done")])
# Passes at baseline (1st run), fails at the gate (2nd), passes when re-run alone (3rd): the sandbox's temporary
# directory lives as long as the task's sandbox.
FLAKY_TEST = (
    "import pathlib\nimport tempfile\n\n\ndef test_sometimes():\n"
    "    counter = pathlib.Path(tempfile.gettempdir()) / 'flaky-count'\n"
    "    runs = int(counter.read_text()) if counter.exists() else 0\n"
    "    counter.write_text(str(runs + 1))\n"
    "    assert runs != 1\n"
)
ADD_DOCSTRING = Reply(
    tool_calls=[
        (
            "str_replace",
            {
                "path": "pkg/report.py",
                "old": "def describe(width, height):\n",
                "new": 'def describe(width, height):\n    """Say the area."""\n',
            },
        )
    ]
)
FLAKY = RunState([ADD_DOCSTRING, finish("Document describe")], extra={"tests/test_flaky.py": FLAKY_TEST})
ON_ONE_COMMIT = RunState([finish("nothing to do")] * 3, tasks=tuple(f"Task number {n}" for n in range(3)))
ADD = Reply(tool_calls=[("create_file", {"path": "pkg/extra.py", "content": "VALUE = 2\n"})])
# Three tasks: the first commits its new file, the second creates it too and then loses the model server, the
# third changes nothing.
THREE_TASKS = RunState(
    [ADD, finish("Add pkg.extra"), ADD, GONE, finish("nothing to do")],
    tasks=("Add pkg.extra", "Lose the server", "Look around"),
)


@pytest.mark.started_at_collection(REPAIRED)
def test_a_regression_goes_back_to_the_model_and_its_repair_is_verified() -> None:
    made = REPAIRED.made()
    repo, summary, events, model = made.repo, made.summary, made.events, made.model
    (task,) = summary.tasks
    assert (task.status, task.verdict) == ("committed", "verified")
    assert task.tests is not None and task.tests.repair_rounds == 1
    assert task.tests.regressed == [] and task.tests.still_failing == ["tests/test_known_bug.py::test_known_bug"]
    repair = model.requests[2][-1]
    assert repair["role"] == "user" and all(test in repair["content"] for test in AREA_TESTS)
    assert "test_known_bug" not in repair["content"], "a test failing before the task is never a regression"
    assert model.requests[2][: len(model.requests[1])] == model.requests[1], "the repair round is append-only"
    assert trailers(repo, task.commit) == {
        "Refactor-Agent-Run": "run-under-test",
        "Refactor-Agent-Model": "scripted",
        "Refactor-Agent-Verdict": "verified",
        "Refactor-Agent-Tests": "2 passed, 1 failed (baseline 2 passed, 1 failed)",
    }
    assert summary.exit_code == 0
    assert [event.verdict for event in events if event.type == "gate"] == ["regressed", "verified"]


@pytest.mark.started_at_collection(STAYS_BROKEN)
def test_work_that_stays_broken_is_committed_as_regressed() -> None:
    stays_broken = STAYS_BROKEN.made()
    tmp_path, repo, summary, model = stays_broken.root, stays_broken.repo, stays_broken.summary, stays_broken.model
    (task,) = summary.tasks
    assert (task.status, task.verdict) == ("committed", "regressed")
    assert task.tests is not None and task.tests.regressed == AREA_TESTS and task.tests.repair_rounds == 2
    assert len(model.requests) == 4, "two repair rounds (the default), then the verdict stands"
    assert git.Repo(repo).commit(task.commit).message.startswith("really done")
    assert summary.exit_code == 1
    assert trailers(repo, task.commit)["Refactor-Agent-Verdict"] == "regressed"
    saved = json.loads((tmp_path / "runs" / "run-under-test" / "summary.json").read_text())
    assert saved["tasks"][0]["tests"]["regressed"] == AREA_TESTS
    report = (tmp_path / "runs" / "run-under-test" / "report.md").read_text()
    assert "| regressed |" in report and "tests/test_geometry.py::test_area" in report


@pytest.mark.started_at_collection(FLAKY)
def test_a_test_that_passes_when_re_run_alone_is_flaky() -> None:
    summary = FLAKY.made().summary
    (task,) = summary.tasks
    assert task.verdict == "verified"
    assert task.tests is not None and task.tests.flaky == ["tests/test_flaky.py::test_sometimes"]


@pytest.mark.started_at_collection(ON_ONE_COMMIT)
def test_tasks_on_one_commit_run_the_baseline_once() -> None:
    made = ON_ONE_COMMIT.made()
    summary, events = made.summary, made.events
    assert [task.verdict for task in summary.tasks] == ["no_changes"] * 3
    baselines = [event for event in events if event.type == "baseline"]
    assert [event.cached for event in baselines] == [False, True, True]
    assert {event.result for event in baselines} == {"2 passed, 1 failed"}


def test_the_users_ignore_file_is_read_once_for_the_run_and_applies_to_each_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = sample_repo(tmp_path)
    (tmp_path / "ignore").write_text("notes.txt\n")
    (tmp_path / "gitconfig").write_text(f"[core]\n\texcludesFile = {tmp_path / 'ignore'}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    script = []
    for number in range(2):
        files = [("notes.txt", "mine\n"), (f"pkg/n{number}.py", "X = 1\n")]
        script += [Reply(tool_calls=[("create_file", {"path": path, "content": text}) for path, text in files])]
        script += [finish(f"Task {number}")]
    started: list[list[str]] = []
    popen = subprocess.Popen
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a[0]) or popen(*a, **k))
    summary, _, _ = run(tmp_path, repo, script, tasks=["One", "Two"])
    committed = [sorted(git.Repo(repo).commit(task.commit).stats.files) for task in summary.tasks if task.commit]
    assert committed == [["pkg/n0.py"], ["pkg/n1.py"]]
    assert len([command for command in started if "--get-regexp" in command]) == 1


def test_the_suite_has_its_own_timeout_not_the_models_command_timeout(tmp_path: Path) -> None:
    """Issue 19: the gate ran the suite under the model's command timeout (600 s), so suites that take longer
    (Django's, typer's on a shared 2-core machine) never ran and every task was unverified."""
    # Each run of the suite lasts longer than the command timeout, by the sleep alone (pytest's start-up aside): the
    # baseline, the gate's check and its re-run of the regressions (no repair round: each would run both again).
    # No command of the model's runs here (the work is a file tool's) and the ledger is off (its symbol lookups run
    # under the command timeout), so the timeout can be this short.
    repo = sample_repo(tmp_path, {"tests/conftest.py": "import time\n\ntime.sleep(0.2)\n"})
    script = [BREAK, finish("Add perimeter")]
    summary, events, _ = run(tmp_path, repo, script, command_timeout_s=0.1, repair_rounds=0, ledger=False)
    (baseline,) = [event for event in events if event.type == "baseline"]
    assert baseline.result == "2 passed, 1 failed"
    assert summary.tasks[0].verdict == "regressed"
    short = tmp_path / "short"
    slow = sample_repo(short, {"tests/conftest.py": "import time\n\ntime.sleep(1.5)\n"})
    _, events, _ = run(short, slow, [finish("nothing to do")], suite_timeout_s=0.1)
    (baseline,) = [event for event in events if event.type == "baseline"]
    assert baseline.result.endswith("timed out after 0.1s")


@pytest.mark.started_at_collection(STAYS_BROKEN)
def test_a_regressed_task_keeps_each_failure_and_every_rounds_count() -> None:
    (task,) = STAYS_BROKEN.made().summary.tasks
    assert task.verdict == "regressed" and task.tests is not None
    assert task.tests.rounds == [2, 2, 2], "the first check and one per repair round"
    assert set(task.tests.failures) == set(AREA_TESTS)
    assert all("assert " in text.splitlines()[0] for text in task.tests.failures.values()), task.tests.failures
    assert reason_line(task).startswith(f"{AREA_TESTS[0]}: assert ")
    assert reason_line(task).endswith("round 1: 2 regressed → round 2: 2 → round 3: 2")


@pytest.mark.started_at_collection(THREE_TASKS)
def test_a_server_lost_mid_task_is_failed_as_lost_never_no_changes() -> None:
    summary = THREE_TASKS.made().summary
    task = summary.tasks[1]  # its work (a file created) done, the server lost
    assert (task.status, task.verdict, task.lost) == ("failed", "failed", "server")
    assert reason_line(task) == f"lost the model server: {GONE}"
    assert summary.exit_code == 1


def test_rejected_calls_reach_the_record_of_a_failed_task(tmp_path: Path) -> None:
    repo = sample_repo(tmp_path)
    missing = Reply(tool_calls=[("str_replace", {"path": "pkg/geometry.py", "old": "no such text", "new": "x"})])
    model = ScriptedModel([missing] * 3)
    config = RunConfig(repo=repo, tasks=["Add perimeter"], runs_dir=tmp_path / "runs", max_turns=3)
    summary = run_in_process(config, model, sandboxes=LocalSandboxes(tmp_path))
    (task,) = summary.tasks
    assert task.verdict == "failed" and task.rejected_calls == {"str_replace": 3}
    assert reason_line(task).startswith("reached --max-turns 3 without finish; 3 rejected tool calls (str_replace 3)")


@pytest.mark.started_at_collection(THREE_TASKS)
def test_a_task_that_made_no_commit_leaves_no_branch() -> None:
    three_tasks = THREE_TASKS.made()
    root, repo, summary = three_tasks.root, three_tasks.repo, three_tasks.summary
    assert [task.verdict for task in summary.tasks] == ["verified", "failed", "no_changes"]
    assert [task.branch is None for task in summary.tasks] == [False, True, True]
    branches = git.Repo(repo).git.for_each_ref("--format=%(refname)", "refs/heads/refactor-agent/").split()
    assert branches == [f"refs/heads/{summary.tasks[0].branch}"], "only the task that committed keeps a branch"
    assert "pkg/extra.py" in (root / "runs" / "run-under-test" / "patch.diff").read_text().split("# task 2")[1]
