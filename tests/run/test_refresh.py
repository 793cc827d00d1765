"""The refresh stage on real git with sandboxes on this machine: a branch replayed onto a moved main and gated
there without a model. `review rebase` runs the same stage in the real Docker sandbox (tests/review/test_review.py)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import git
import pytest

from agent.gate.baseline import BaselineCache
from agent.protocol.config import RunConfig
from agent.protocol.events import Event
from agent.run.stages.refresh import BranchTrial, refresh
from agent.worktree.leftovers import stale_scratch

from support import background
from support.local_sandbox import LocalExecutor, LocalSandboxes
from support.repos import SAMPLE_FILES, checkout_fingerprint, copy_of_template, made_at_a_root, make_repo, once_made
from support.repos import git as run_git

BRANCH = "refactor-agent/20261201-010000-a1b2/1-add-a-units-module"
UNITS_TEST = "from pkg.units import METRE\n\n\ndef test_metre():\n    assert METRE == 1\n"


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, content in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(content)
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-q", "-m", message)
    return run_git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """main, and a task branch off it that adds a module and its test (made once per session, copied)."""
    return copy_of_template(("refresh_repo",), tmp_path / "repo", _with_a_task_branch)


def _with_a_task_branch(path: Path) -> None:
    repo = make_repo(path)
    run_git(repo, "checkout", "-q", "-b", BRANCH)
    _commit(repo, {"pkg/units.py": "METRE = 1\n", "tests/test_units.py": UNITS_TEST}, "Add a units module")
    run_git(repo, "checkout", "-q", "main")


class _Watched(LocalSandboxes):
    """Sandboxes on this machine that call `during(self, workspace)` when the gate's sandbox opens."""

    def __init__(self, root: Path, during: Callable[[LocalSandboxes, Path], None]) -> None:
        super().__init__(root)
        self.during = during

    @contextlib.contextmanager
    def open(self, image: str, workspace: Path, **options: Any) -> Iterator[LocalExecutor]:
        self.during(self, workspace)
        with super().open(image, workspace, **options) as executor:
            yield executor


def _refresh(
    tmp_path: Path,
    repo: Path,
    onto: str,
    after: list[str] | None = None,
    during: Callable[[LocalSandboxes, Path], None] | None = None,
) -> tuple[BranchTrial, list[Event]]:
    events: list[Event] = []
    sandboxes = LocalSandboxes(tmp_path) if during is None else _Watched(tmp_path, during)
    config = RunConfig(repo=repo, tasks=["Add a units module"], runs_dir=tmp_path / "runs", after=after or [])
    user = git.Repo(repo)
    environment = sandboxes.environment(user, config, log_path=tmp_path / "env.log", progress=print, deadline=None)
    tip = run_git(repo, "rev-parse", BRANCH).strip()
    trial = refresh(
        repo=user,
        sandboxes=sandboxes,
        environment=environment,
        config=config,
        task=1,
        branch=BRANCH,
        tip=tip,
        onto=onto,
        commits=run_git(repo, "rev-list", "--reverse", f"{onto}..{tip}").split(),
        cache=BaselineCache(tmp_path / "runs"),
        run_id="refresh-test",
        emit=events.append,
    )
    return trial, events


@dataclass(frozen=True)
class Refreshed:
    """What a refresh made at `root` left: the user's repository, the base it went onto, the branch's tip before,
    the trial and its events, and the checkout's fingerprint before the refresh."""

    root: Path
    repo: Path
    onto: str
    tip: str
    trial: BranchTrial
    events: list[Event]
    before: dict[str, str]


@dataclass(frozen=True, eq=False)
class RefreshState:
    """The task branch refreshed onto the main `moves` makes (it returns main's new commit), with `after` commands:
    made once per session at a root of its own; a test that marks it (@pytest.mark.started_at_collection(state))
    has it made in the background as collection ends (support/background.py), while the session goes on."""

    moves: Callable[[Path], str]
    after: tuple[str, ...] = ()

    def __call__(self) -> tuple[Refreshed, Path, Path]:
        return made_at_a_root(self._refresh)

    def _refresh(self, root: Path) -> Refreshed:
        repo = copy_of_template(("refresh_repo",), root / "repo", _with_a_task_branch)
        onto = self.moves(repo)
        before = checkout_fingerprint(repo)
        tip = run_git(repo, "rev-parse", BRANCH).strip()
        trial, events = _refresh(root, repo, onto, after=list(self.after))
        return Refreshed(root, repo, onto, tip, trial, events, before)

    def made(self) -> Refreshed:
        return once_made(self, lambda: background.made(self), lambda made: made.repo)


def _main_moves(repo: Path) -> str:
    return _commit(repo, {"NOTES.txt": "main moved\n"}, "main moves")


def _main_adds_its_own_units(repo: Path) -> str:
    return _commit(repo, {"pkg/units.py": "METRE = 100\n"}, "main adds its own units")


def _main_checks_the_docstring_the_branch_rewords(repo: Path) -> str:
    # The branch also rewords the docstring; main now insists it starts with "Area".
    run_git(repo, "checkout", "-q", BRANCH)
    reworded = SAMPLE_FILES["pkg/geometry.py"].replace("Area of a rectangle.", "The area.")
    _commit(repo, {"pkg/geometry.py": reworded}, "Reword the docstring")
    run_git(repo, "checkout", "-q", "main")
    doc_test = "from pkg.geometry import compute_area\n\n\ndef test_doc():\n"
    doc_test += "    assert compute_area.__doc__.startswith('Area')\n"
    return _commit(repo, {"tests/test_doc.py": doc_test}, "main checks the docstring")


ONTO_MOVED_MAIN = RefreshState(_main_moves)
INTO_A_CONFLICT = RefreshState(_main_adds_its_own_units)
INTO_A_REGRESSION = RefreshState(_main_checks_the_docstring_the_branch_rewords)
WITH_A_FORMATTER = RefreshState(_main_moves, after=("printf '# formatted\\n' >> pkg/units.py",))
WITH_A_FAILING_LINTER = RefreshState(_main_moves, after=("echo 'lint: 2 errors'; exit 1",))


@pytest.mark.started_at_collection(ONTO_MOVED_MAIN)
def test_a_branch_replays_onto_the_moved_main_and_is_verified_there_without_a_model() -> None:
    made = ONTO_MOVED_MAIN.made()
    repo, onto, tip, trial, events = made.repo, made.onto, made.tip, made.trial, made.events
    assert (trial.outcome, trial.verdict, trial.commit) == ("clean", "verified", tip)
    assert trial.tests == "3 passed (baseline 2 passed)"
    rebased = trial.rebased_commit
    assert rebased is not None and run_git(repo, "rev-parse", f"{rebased}^").strip() == onto
    message = run_git(repo, "log", "-1", "--format=%B", rebased)
    assert f"Refactor-Agent-Rebased-Onto: {onto}" in message and "Refactor-Agent-Verdict: verified" in message
    assert run_git(repo, "diff", "--name-only", onto, rebased).split() == ["pkg/units.py", "tests/test_units.py"]
    assert [event.type for event in events if event.type in ("baseline", "gate")] == ["baseline", "gate"]
    assert run_git(repo, "rev-parse", BRANCH).strip() == tip, "nothing moves: the caller points a branch at it"
    assert checkout_fingerprint(repo) == made.before


@pytest.mark.started_at_collection(INTO_A_CONFLICT)
def test_a_conflict_with_the_new_base_names_the_files_and_makes_no_commit() -> None:
    trial = INTO_A_CONFLICT.made().trial
    assert (trial.outcome, trial.conflicts, trial.rebased_commit) == ("conflicts", ["pkg/units.py"], None)


@pytest.mark.started_at_collection(INTO_A_REGRESSION)
def test_a_change_the_new_base_breaks_is_regressed_with_the_tests_named() -> None:
    trial = INTO_A_REGRESSION.made().trial
    assert (trial.outcome, trial.verdict, trial.regressed) == (
        "regressed",
        "regressed",
        ["tests/test_doc.py::test_doc"],
    )
    assert trial.rebased_commit is not None, "kept for the record; a caller moves no branch to it"


@pytest.mark.started_at_collection(WITH_A_FORMATTER)
def test_the_tasks_after_commands_run_before_the_check_and_their_change_is_in_the_rebased_commit() -> None:
    made = WITH_A_FORMATTER.made()
    repo, onto, trial = made.repo, made.onto, made.trial
    assert (trial.outcome, trial.verdict) == ("clean", "verified")
    assert trial.rebased_commit is not None
    assert run_git(repo, "show", f"{trial.rebased_commit}:pkg/units.py") == "METRE = 1\n# formatted\n"
    assert run_git(repo, "rev-parse", f"{trial.rebased_commit}^").strip() == onto


@pytest.mark.started_at_collection(WITH_A_FAILING_LINTER)
def test_an_after_command_that_fails_makes_the_refresh_regressed() -> None:
    trial = WITH_A_FAILING_LINTER.made().trial
    assert (trial.outcome, trial.verdict, trial.rebased_commit) == ("regressed", "regressed", None)
    assert trial.reason == "after command \"echo 'lint: 2 errors'; exit 1\" exited 1: lint: 2 errors"


def test_a_refresh_of_its_own_checks_out_in_a_scratch_directory_the_next_sweep_removes_after_a_kill(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`review rebase` has no run scratch: the refresh's checkout lives in an owned one of its own, so a kill -9
    during its gate leaves nothing the next run's sweep does not find (with git's record of the checkout)."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    onto = _commit(repo, {"NOTES.txt": "main moved\n"}, "main moves")
    found: list[tuple[Path, Path | None]] = []

    def sweep_would_find(sandboxes: LocalSandboxes, workspace: Path) -> None:
        # As the next run sees it while the checkout's gate runs: this process taken for one that has ended.
        with mock.patch("agent.worktree.leftovers.owner_is_gone", return_value=True):
            found.extend((directory, record.git_dir) for directory, record in stale_scratch(root=root))
        assert found and workspace.is_relative_to(found[0][0])

    trial, _events = _refresh(tmp_path, repo, onto, during=sweep_would_find)
    assert trial.outcome == "clean"
    assert found == [(found[0][0], (repo / ".git").resolve())]
    assert list(root.iterdir()) == []  # gone with the refresh's end, and git's record of its checkout too
    assert run_git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
