"""A task's `before` and `after` commands (the night file's, or --before/--after), run in the task's sandbox around
the model's work: the in-process scripted model, sandboxes on this machine, real git."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.protocol.config import RunConfig
from agent.protocol.records import TaskSummary

from support import background
from support.local_sandbox import LocalSandboxes
from support.repos import SAMPLE_FILES, git, made_at_a_root, make_repo, once_made
from support.scripted_model import ScriptedModel, run_in_process
from support.scripted_server import Reply

CODEMOD = "printf 'UNITS = 1\\n' > pkg/units.py"
NEEDS_OK = "test -f ok.txt || { echo 'ok.txt is missing: create it'; exit 1; }"


def finish(summary: str) -> Reply:
    return Reply(tool_calls=[("finish", {"summary": summary})])


@dataclass(frozen=True, eq=False)
class CommandsRun:
    """A run of "Add units" with `before` and `after` commands on the sample repository, made once per session at a
    root of its own; a test that marks it (@pytest.mark.started_at_collection(run)) has it made in the background
    as collection ends (support/background.py), while the session goes on."""

    script: list
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()

    def __call__(self) -> tuple[tuple[Path, TaskSummary, ScriptedModel], Path, Path]:
        return made_at_a_root(self._run)

    def _run(self, root: Path) -> tuple[Path, TaskSummary, ScriptedModel]:
        repo = make_repo(root / "repo", SAMPLE_FILES)
        model = ScriptedModel(self.script)
        config = RunConfig(
            repo=repo, tasks=["Add units"], runs_dir=root / "runs", max_turns=10,
            before=list(self.before), after=list(self.after),
        )  # fmt: skip
        (task,) = run_in_process(config, model, sandboxes=LocalSandboxes(root)).tasks
        return repo, task, model

    def made(self) -> tuple[Path, TaskSummary, ScriptedModel]:
        return once_made(self, lambda: background.made(self), lambda made: made[0])


BEFORE = CommandsRun([finish("Add units")], before=(CODEMOD,))
FAILING_BEFORE = CommandsRun([finish("never asked")], before=("echo 'codemod broke' >&2; exit 3",))
CREATE_UNITS = Reply(tool_calls=[("create_file", {"path": "pkg/units.py", "content": "UNITS = 1\n"})])
CREATE_OK = Reply(tool_calls=[("create_file", {"path": "ok.txt", "content": "ok\n"})])
FORMATTER = "printf '# formatted\\n' >> pkg/units.py"
FAILING_AFTER = CommandsRun(
    [CREATE_UNITS, finish("Add units"), CREATE_OK, finish("Add units and ok.txt")], after=(NEEDS_OK, FORMATTER)
)


@pytest.mark.started_at_collection(BEFORE)
def test_a_before_commands_change_is_packed_gated_and_committed() -> None:
    repo, task, model = BEFORE.made()
    assert (task.status, task.verdict) == ("committed", "verified")
    assert task.tests is not None and (task.tests.baseline, task.tests.final) == ("2 passed", "2 passed")
    assert git(repo, "show", f"{task.commit}:pkg/units.py") == "UNITS = 1\n"
    system = model.requests[0][0]["content"]
    assert "UNITS = 1" in system, "the repository was packed as the command left it"


@pytest.mark.started_at_collection(FAILING_BEFORE)
def test_a_failing_before_command_fails_the_task_before_any_model_request() -> None:
    repo, task, model = FAILING_BEFORE.made()
    assert (task.status, task.verdict) == ("failed", "failed")
    assert task.reason == "before command \"echo 'codemod broke' >&2; exit 3\" exited 3: codemod broke"
    assert model.requests == []
    assert task.commit is None and git(repo, "for-each-ref", "refs/heads/refactor-agent/") == "", "no commit, no branch"


@pytest.mark.started_at_collection(FAILING_AFTER)
def test_a_failing_after_command_is_a_repair_round_with_its_output() -> None:
    repo, task, model = FAILING_AFTER.made()
    assert (task.status, task.verdict) == ("committed", "verified")
    assert task.tests is not None and task.tests.repair_rounds == 1
    repair = model.requests[2][-1]
    assert repair["role"] == "user"
    assert f"$ {NEEDS_OK}" in repair["content"] and "ok.txt is missing: create it" in repair["content"]
    # The formatter ran once the first command passed (after the repair only): its change is committed.
    assert git(repo, "show", f"{task.commit}:pkg/units.py") == "UNITS = 1\n# formatted\n"
    assert git(repo, "show", f"{task.commit}:ok.txt") == "ok\n"
