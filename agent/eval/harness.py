"""One eval: per task a fresh repository, one run with the existing runner, then the task's test in a sandbox.

The test is suite code, and it reads model-written files: it runs in a sandbox container over a checkout of the
run's commit, from a folder one level below the checkout's root that is made there only for it, so it is never
in the agent's worktree nor in its packed context. Its verdict is its exit code. It also runs on the untouched
repository: a task whose test already passes there is invalid, not solved.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import git

from agent.dispatch.in_order import InOrder
from agent.eval.score import EvalReport, TaskResult, render_markdown
from agent.eval.suite import SuiteTask
from agent.protocol.config import RunConfig
from agent.protocol.model import ChatModel
from agent.protocol.records import TaskSummary, now_iso
from agent.record.journal import RunJournal
from agent.run.compose import build_run
from agent.run.sandboxes import Sandboxes
from agent.worktree.workspace import Workspace
from sandbox import SandboxLimits

EVAL_FILE = "eval.json"
REPORT_FILE = "report.md"
TEST_FOLDER = ".refactor-agent-eval"  # made one level below the checkout's root for the test, nowhere else
TEST_TIMEOUT_S = 300.0
TEST_OUTPUT_CHARS = 2_000
# Fixed author and dates: a repository made twice from the same files gets the same commit, so the gate's
# baseline of one task is reused by the next task on that repository.
FIXED_COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "refactor-agent eval",
    "GIT_AUTHOR_EMAIL": "eval@refactor-agent.invalid",
    "GIT_COMMITTER_NAME": "refactor-agent eval",
    "GIT_COMMITTER_EMAIL": "eval@refactor-agent.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}

ModelFor = Callable[[SuiteTask], ChatModel]
Log = Callable[[str], None]


def _fresh_repository(task: SuiteTask, scratch: Path) -> Path:
    """A git repository of the suite's copy, one commit on `main`, made with no hooks nor templates of the user's."""
    repo = scratch / "repo"
    shutil.copytree(task.repository_path, repo, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    environment = {**os.environ, **FIXED_COMMIT_ENV, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    for command in (
        ["init", "-q", "-b", "main", "--template="],
        ["add", "-A"],
        ["commit", "-q", "-m", task.repository],
    ):
        subprocess.run(["git", *command], cwd=repo, env=environment, check=True, capture_output=True)
    return repo


class TestRun:
    def __init__(self, exit_code: int | None, output: str) -> None:
        self.exit_code, self.output = exit_code, output


def run_test(task: SuiteTask, repo: git.Repo, commit: str, *, config: RunConfig, sandboxes: Sandboxes) -> TestRun:
    """The task's test over a checkout of `commit`, in a sandbox; the suite's test folder is mounted read-only."""
    checkout = Workspace.detached(repo, commit, label="eval-test", max_file_bytes=config.max_file_bytes)
    # `rm -rf` first: a folder of that name in the model's result is replaced, inside the sandbox.
    command = (
        f"rm -rf {TEST_FOLDER} && mkdir {TEST_FOLDER} && cp {shlex.quote(str(task.test))} {TEST_FOLDER}/ && "
        f"cd {TEST_FOLDER} && python3 -X utf8 -B {shlex.quote(task.test.name)}"
    )
    try:
        limits = SandboxLimits(command_timeout_s=TEST_TIMEOUT_S)
        with sandboxes.open(
            config.image, checkout.path, run_id="eval-test", limits=limits, read_only_paths=[task.test.parent]
        ) as sandbox:
            result = sandbox.execute(command, timeout_s=TEST_TIMEOUT_S)
    finally:
        checkout.remove()
    exit_code = None if result.timed_out else result.exit_code
    return TestRun(exit_code, result.output[-TEST_OUTPUT_CHARS:])


def _outcome(untouched: TestRun, after: TestRun, task: TaskSummary) -> tuple[str, str]:
    if untouched.exit_code is None or after.exit_code is None:
        return "error", "the task's test did not finish (timed out or killed)"
    if untouched.exit_code == 0:
        return "invalid", "the task's test passes on the untouched repository"
    if task.reason.startswith("internal error"):
        return "error", task.reason
    if after.exit_code == 0:
        return "solved", task.reason
    return "unsolved", task.reason


def _measured(result: TaskResult, task: TaskSummary) -> None:
    result.turns = task.turns
    result.gate_verdict = task.verdict
    if task.metrics is not None:
        result.prompt_tokens = task.metrics.prompt_tokens
        result.generated_tokens = task.metrics.generated_tokens
        result.cache_hit_ratio = task.metrics.cache_hit_ratio
        result.acceptance_rate = task.metrics.acceptance_rate


def evaluate_task(
    index: int,
    task: SuiteTask,
    *,
    template: RunConfig,
    model: ChatModel,
    server_url: str | None,
    sandboxes: Sandboxes,
    runs_dir: Path,
) -> TaskResult:
    started = time.monotonic()
    result = TaskResult(id=task.id, outcome="error")
    scratch = Path(tempfile.mkdtemp(prefix="refactor-agent-eval-"))
    try:
        path = _fresh_repository(task, scratch)
        repo = git.Repo(path)
        base = repo.head.commit.hexsha
        untouched = run_test(task, repo, base, config=template, sandboxes=sandboxes)
        result.untouched_exit = untouched.exit_code
        config = template.model_copy(update={"repo": path, "tasks": [task.prompt], "runs_dir": runs_dir})
        result.run_id = f"{index:03d}-{task.repository}-{task.name}"[:120]
        journal = RunJournal(runs_dir, result.run_id)
        journal.write_config(config)
        try:
            run = build_run(
                config,
                repos={path: repo},
                sandboxes=sandboxes,
                model=model,
                server_url=server_url,
                journal=journal,
                observe=lambda event: None,
                dispatch=InOrder(),
            )
            (summary,) = run.execute().tasks
        finally:
            journal.close()
        if run.stopped_by is not None:  # a stop signal: this task's run kept what it did; the eval ends here
            result.reason = str(run.stopped_by)
            raise run.stopped_by
        _measured(result, summary)
        after = run_test(task, repo, summary.commit or base, config=template, sandboxes=sandboxes)
        result.exit_code, result.test_output = after.exit_code, after.output
        result.outcome, result.reason = _outcome(untouched, after, summary)  # type: ignore[assignment]
    except Exception as error:  # one task's failure is its result; the next task still runs
        result.reason = f"eval error: {error.__class__.__name__}: {error}"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        result.wall_time_s = round(time.monotonic() - started, 3)
    return result


def write_report(report: EvalReport, directory: Path) -> None:
    (directory / EVAL_FILE).write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    (directory / REPORT_FILE).write_text(render_markdown(report), encoding="utf-8")


def run_eval(
    tasks: list[SuiteTask],
    report: EvalReport,
    directory: Path,
    *,
    template: RunConfig,
    model_for: ModelFor,
    server_url: str | None,
    sandboxes: Sandboxes,
    log: Log,
) -> EvalReport:
    """Every task in order; eval.json and report.md are rewritten after each, so a stopped eval keeps its results."""
    try:
        for index, task in enumerate(tasks, start=1):
            result = evaluate_task(
                index,
                task,
                template=template,
                model=model_for(task),
                server_url=server_url,
                sandboxes=sandboxes,
                runs_dir=directory / "runs",
            )
            report.results.append(result)
            write_report(report, directory)
            log(
                f"[{index}/{len(tasks)}] {task.id}: {result.outcome}" + (f" ({result.reason})" if result.reason else "")
            )
    finally:
        report.ended_at = now_iso()
        write_report(report, directory)
    return report
