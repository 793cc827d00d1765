"""A task's `before` and `after` commands (the night file's, or --before/--after), run in the task's sandbox around
the model's work: the in-process scripted model, sandboxes on this machine, real git."""

from __future__ import annotations

from pathlib import Path

from agent.protocol.config import RunConfig
from agent.protocol.records import TaskSummary

from support.local_sandbox import LocalSandboxes
from support.repos import SAMPLE_FILES, git, make_repo
from support.scripted_model import ScriptedModel, run_in_process
from support.scripted_server import Reply

CODEMOD = "printf 'UNITS = 1\\n' > pkg/units.py"
NEEDS_OK = "test -f ok.txt || { echo 'ok.txt is missing: create it'; exit 1; }"


def finish(summary: str) -> Reply:
    return Reply(tool_calls=[("finish", {"summary": summary})])


def _run(tmp_path: Path, script: list, **commands: list[str]) -> tuple[Path, TaskSummary, ScriptedModel]:
    repo = make_repo(tmp_path / "repo", SAMPLE_FILES)
    model = ScriptedModel(script)
    config = RunConfig(repo=repo, tasks=["Add units"], runs_dir=tmp_path / "runs", max_turns=10, **commands)
    (task,) = run_in_process(config, model, sandboxes=LocalSandboxes(tmp_path)).tasks
    return repo, task, model


def test_a_before_commands_change_is_packed_gated_and_committed(tmp_path: Path) -> None:
    repo, task, model = _run(tmp_path, [finish("Add units")], before=[CODEMOD])
    assert (task.status, task.verdict) == ("committed", "verified")
    assert task.tests is not None and (task.tests.baseline, task.tests.final) == ("2 passed", "2 passed")
    assert git(repo, "show", f"{task.commit}:pkg/units.py") == "UNITS = 1\n"
    system = model.requests[0][0]["content"]
    assert "UNITS = 1" in system, "the repository was packed as the command left it"


def test_a_failing_before_command_fails_the_task_before_any_model_request(tmp_path: Path) -> None:
    repo, task, model = _run(tmp_path, [finish("never asked")], before=["echo 'codemod broke' >&2; exit 3"])
    assert (task.status, task.verdict) == ("failed", "failed")
    assert task.reason == "before command \"echo 'codemod broke' >&2; exit 3\" exited 3: codemod broke"
    assert model.requests == []
    assert task.commit is None and git(repo, "for-each-ref", "refs/heads/refactor-agent/") == "", "no commit, no branch"


def test_a_failing_after_command_is_a_repair_round_with_its_output(tmp_path: Path) -> None:
    create_units = Reply(tool_calls=[("create_file", {"path": "pkg/units.py", "content": "UNITS = 1\n"})])
    create_ok = Reply(tool_calls=[("create_file", {"path": "ok.txt", "content": "ok\n"})])
    script = [create_units, finish("Add units"), create_ok, finish("Add units and ok.txt")]
    formatter = "printf '# formatted\\n' >> pkg/units.py"
    repo, task, model = _run(tmp_path, script, after=[NEEDS_OK, formatter])
    assert (task.status, task.verdict) == ("committed", "verified")
    assert task.tests is not None and task.tests.repair_rounds == 1
    repair = model.requests[2][-1]
    assert repair["role"] == "user"
    assert f"$ {NEEDS_OK}" in repair["content"] and "ok.txt is missing: create it" in repair["content"]
    # The formatter ran once the first command passed (after the repair only): its change is committed.
    assert git(repo, "show", f"{task.commit}:pkg/units.py") == "UNITS = 1\n# formatted\n"
    assert git(repo, "show", f"{task.commit}:ok.txt") == "ok\n"
