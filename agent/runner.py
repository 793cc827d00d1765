"""One run: its tasks, each in its own worktree and container; side effects (commit, patch) after the loop.

The tasks go one after the other here (InOrder) unless a TaskDispatch says otherwise: in parallel over a fleet of
servers (agent/fleet_dispatch.py) or as Ray tasks on other machines (agent/ray_executor.py).

A task that fails for any reason is recorded and the next task still runs: a crash at 3 a.m. costs one task,
not the night. Only a stop signal (SIGINT, SIGTERM, SIGHUP) ends the run early, and it ends it the same way:
the task in flight keeps its diff (patch.diff, and an interrupted commit on its branch), summary.json says
interrupted, and the run's containers and worktrees are removed.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Protocol

import docker
import git
import httpx

from agent.config import RunConfig
from agent.context import pack_options, system_prompt, task_prompt
from agent.environment.stage import ENV_BUILD_LOG, prepare_environment
from agent.events import (
    EnvironmentProgress,
    EnvironmentReady,
    Event,
    Repair,
    Retry,
    RunEnd,
    RunStart,
    TaskEnd,
    TaskStart,
)
from agent.gate.baseline import BaselineCache, baseline_key, image_identity
from agent.gate.stage import Gate, GateRecord
from agent.gate.syntax import MAX_CHECKED_BYTES
from agent.gate.verdict import GateCheck, evidence_trailer, repair_message
from agent.interrupt import Interrupted
from agent.journal import PATCH_MAX_BYTES, RunJournal
from agent.leftovers import create_run_scratch, remove_run_scratch
from agent.llama_api import LlamaServerAPI, ServerError
from agent.llm import ChatModel, RetryPolicy
from agent.loop import AgentLoop, LoopResult
from agent.metrics import (
    RequestStats,
    SpecCounters,
    scrape_spec_counters,
    speculation_configured,
    speculation_warning,
    summarize,
)
from agent.report import EnvironmentRecord, GateEvidence, RunSummary, TaskSummary, now_iso
from agent.workspace import Workspace
from sandbox import DockerSandbox, SandboxLimits, remove_run_containers
from tools import ToolContext, default_registry
from tools.ledger import Ledger, old_names_in
from tools.symbols import sandbox_mounts
from tools.test_command import detect_test_command

Emit = Callable[[Event], None]
INTERRUPTED_TRAILER = {"Refactor-Agent-Status": "interrupted"}


class TaskDispatch(Protocol):
    """How a run's tasks are executed: the narrow hook for a fleet of servers (agent/fleet_dispatch.py) and for
    Ray (agent/ray_executor.py). `run_tasks` yields each task's outcome as it ends, in any order."""

    def prepare(self, run: Run) -> EnvironmentRecord | None: ...

    def run_tasks(self, run: Run, tasks: list[tuple[int, str]]) -> Iterator[TaskSummary]: ...


class InOrder:
    """The default: here, one task after the other, on the run's own model and server."""

    def prepare(self, run: Run) -> EnvironmentRecord | None:
        return run.prepare_environment()

    def run_tasks(self, run: Run, tasks: list[tuple[int, str]]) -> Iterator[TaskSummary]:
        for index, task in tasks:
            yield run.run_task(index, task)
            if run.stopped_by is not None:
                return


def _spec_counters(api: LlamaServerAPI | None) -> SpecCounters | None:
    """Metrics are for the report: a server that cannot give them must not fail the task."""
    if api is None:
        return None
    try:
        return scrape_spec_counters(api)
    except (ServerError, httpx.HTTPError):
        return None


def _delta(after: SpecCounters | None, before: SpecCounters | None) -> SpecCounters | None:
    return after - before if after is not None and before is not None else None


def _measure(
    report: TaskSummary | RunSummary, requests: list[RequestStats], spec_delta: SpecCounters | None, speculation: bool
) -> None:
    report.metrics = summarize(requests, spec_delta)
    warning = speculation_warning(report.metrics, speculation)
    report.warnings = [warning] if warning else []


def _evidence(record: GateRecord, check: GateCheck) -> GateEvidence:
    comparison = check.comparison
    lists = comparison.model_dump() if comparison is not None else {}
    return GateEvidence(
        baseline=record.baseline.describe() if record.baseline else None,
        final=check.final.describe() if check.final else None,
        syntax_errors=check.syntax_errors,
        repair_rounds=record.repair_rounds,
        **lists,
    )


class Run:
    def __init__(
        self,
        config: RunConfig,
        *,
        repo: git.Repo,
        docker_client: docker.DockerClient | None,
        model: ChatModel,
        server_url: str | None,
        journal: RunJournal,
        observe: Emit,
        dispatch: TaskDispatch | None = None,
    ) -> None:
        """docker_client is None only where no task runs here (the head of a Ray run)."""
        self.config = config
        self.dispatch = dispatch or InOrder()
        self.repo = repo
        self.docker = docker_client
        self.model = model
        self.server_url = server_url
        self.journal = journal
        self.observe = observe
        self.registry = default_registry(symbol_tools=config.symbol_tools, ledger=config.ledger)
        # None: a scripted model with no server (`eval --oracle`): tokens are estimated, no metrics are scraped.
        self.server_api = LlamaServerAPI(server_url) if server_url else None
        self.requests: list[RequestStats] = []
        self.baselines = BaselineCache(config.runs_dir)
        self.git_dir = Path(repo.git.rev_parse("--path-format=absolute", "--git-common-dir"))
        self.scratch: Path | None = None
        self.loop: AgentLoop | None = None  # the task's loop, so an interrupted task still reports its turns
        self.stopped_by: Interrupted | None = None
        self.current_task: int | None = None
        self.environment: EnvironmentRecord | None = None
        try:
            self.speculation = self.server_api is not None and speculation_configured(self.server_api)
        except (ServerError, httpx.HTTPError):
            self.speculation = False

    def on_server(self, model: ChatModel, server_url: str | None) -> Run:
        """This run as one task running in parallel with others sees it: its own model, server and task state
        (current task, loop, stop), sharing everything else (journal, baselines, environment, the requests)."""
        view = copy.copy(self)
        view.model, view.server_url = model, server_url
        view.server_api = None  # the server's counters mix every task it serves: the task's metrics are estimated
        view.loop, view.current_task, view.stopped_by = None, None, None
        return view

    def emit(self, event: Event) -> None:
        """Every event of a task carries its index, whoever made it (the loop, the gate, the model client)."""
        if event.task is None and self.current_task is not None:
            event = event.model_copy(update={"task": self.current_task})
        self.journal.record(event)
        self.observe(event)

    def execute(self) -> RunSummary:
        started = time.monotonic()
        summary = RunSummary(
            run_id=self.journal.run_id,
            repo=str(self.config.repo),
            model=self.model.name,
            server_url=self.server_url or "none (scripted model)",
            speculation_configured=self.speculation,
        )
        try:
            self.emit(RunStart(run_id=self.journal.run_id, tasks=len(self.config.tasks)))
            self.journal.write_summary(summary)
            self.scratch = create_run_scratch(self.journal.run_id, self.git_dir)
            summary.environment = self.environment = self.dispatch.prepare(self)
            self.journal.write_summary(summary)
            counters_at_start = _spec_counters(self.server_api)
            for outcome in self.dispatch.run_tasks(self, list(enumerate(self.config.tasks, start=1))):
                summary.tasks = sorted([*summary.tasks, outcome], key=lambda task: task.index)
                summary.environment = self.environment  # Ray's workers report it with their tasks
                run_delta = _delta(_spec_counters(self.server_api), counters_at_start)
                _measure(summary, self.requests, run_delta, self.speculation)
                summary.wall_time_s = round(time.monotonic() - started, 3)
                if self.stopped_by is not None:
                    break
                self.journal.write_summary(summary)
        except Interrupted as stop:  # between tasks, or while a task was being set up
            self.stopped_by = stop
        finally:
            # From here on further stop signals are ignored (agent.interrupt), so these steps always finish.
            summary.ended_at = now_iso()
            if self.stopped_by is not None:
                summary.status, summary.interrupted_by = "interrupted", self.stopped_by.signal_name
                summary.wall_time_s = round(time.monotonic() - started, 3)
                with contextlib.suppress(Exception):  # the signal may have landed while one was being made
                    self.remove_containers()
            self.journal.write_summary(summary)
            if self.scratch is not None:
                remove_run_scratch(self.scratch, self.git_dir)
            if self.server_api is not None:
                self.server_api.close()
            self.current_task = None
            self.emit(
                RunEnd(
                    status=summary.status,
                    signal=summary.interrupted_by,
                    exit_code=summary.exit_code,
                    wall_time_s=summary.wall_time_s,
                )
            )
        return summary

    def run_task(self, index: int, task: str) -> TaskSummary:
        """The stages of one task: workspace, then in its sandbox baseline and loop and gate, then settle."""
        started = time.monotonic()
        workspace = Workspace.create(
            self.repo,
            run_id=self.journal.run_id,
            task=f"{index}-{task}",
            max_file_bytes=self.config.max_file_bytes,
            scratch_root=self.scratch,
        )
        self.current_task = index
        self.emit(TaskStart(text=task, branch=workspace.branch))
        outcome = TaskSummary(
            index=index,
            task=task,
            status="failed",
            reason="",
            branch=workspace.branch,
            base_commit=workspace.base_commit,
        )
        self.loop = None
        counters_before = _spec_counters(self.server_api)
        try:
            result, check = self._in_sandbox(workspace, task)
            self.loop = None  # its turns and requests are in the result from here on
            self.requests += result.requests
            task_delta = _delta(_spec_counters(self.server_api), counters_before)
            _measure(outcome, result.requests, task_delta, self.speculation)
            outcome = self._settle(workspace, outcome, result, check)
        except Interrupted as stop:
            self.stopped_by = stop
            self._settle_interrupted(workspace, outcome, stop)
        except Exception as error:  # the next task still deserves its chance
            outcome.reason = f"internal error: {error.__class__.__name__}: {error}"
            with contextlib.suppress(Exception):  # keep what the model did so far for the morning
                self._save_patch(workspace, outcome)
        finally:
            outcome.wall_time_s = round(time.monotonic() - started, 3)
            self.emit(TaskEnd(outcome=outcome))
            workspace.remove()
        return outcome

    def _settle_interrupted(self, workspace: Workspace, outcome: TaskSummary, stop: Interrupted) -> None:
        """Keep what the model did so far: in patch.diff, and as a commit marked interrupted on the task branch.

        The sandbox is already gone (the signal unwound through its `with`), so nothing changes the worktree
        any more."""
        outcome.status = outcome.verdict = "interrupted"
        outcome.reason = f"interrupted by {stop.signal_name}"
        if self.loop is not None:
            outcome.turns = self.loop.turn
            self.requests += self.loop.requests
            _measure(outcome, self.loop.requests, None, self.speculation)
        with contextlib.suppress(Exception):
            outcome.commit = workspace.commit(
                f"refactor-agent: {outcome.task} (interrupted, unfinished)",
                {**self._trailers(), **INTERRUPTED_TRAILER},
            )
        with contextlib.suppress(Exception):  # after the commit, so a cut patch can name it
            self._save_patch(workspace, outcome)

    def remove_containers(self) -> None:
        if self.docker is not None:
            remove_run_containers(self.docker, self.journal.run_id)

    def _trailers(self) -> dict[str, str]:
        return {"Refactor-Agent-Run": self.journal.run_id, "Refactor-Agent-Model": self.model.name}

    def prepare_environment(self) -> EnvironmentRecord:
        """Once per run, before the tasks: the repository's environment image, reused or built."""
        assert self.docker is not None, "tasks run where Docker is"
        record = prepare_environment(
            self.repo,
            client=self.docker,
            sandbox_image=self.config.image,
            image_explicit=self.config.image_explicit,
            spec=self.config.environment,
            test_command=self.config.test_cmd,
            log_path=self.journal.directory / ENV_BUILD_LOG,
            progress=lambda message: self.emit(EnvironmentProgress(message=message)),
        )
        self.emit(EnvironmentReady(record=record))
        return record

    def _in_sandbox(self, workspace: Workspace, task: str) -> tuple[LoopResult, GateRecord]:
        test_command = self.config.test_cmd or detect_test_command(workspace.path)
        limits = SandboxLimits(command_timeout_s=self.config.command_timeout_s)
        environment = self.environment
        failed = environment is not None and environment.status == "failed"
        # A failed environment leaves the bare image for the model's work, and the gate nothing to verify with.
        image = environment.image if environment is not None and not failed else self.config.image
        with DockerSandbox(
            image,
            workspace.path,
            run_id=self.journal.run_id,
            limits=limits,
            client=self.docker,
            read_only_paths=[workspace.git_common_dir, *self._tool_mounts()],
        ) as sandbox:
            context = ToolContext(
                executor=sandbox,
                test_command=test_command,
                command_timeout_s=self.config.command_timeout_s,
                output_chars=self.config.tool_output_chars,
                ledger=Ledger(old_names_in(task)) if self.config.ledger else None,
            )
            gate = Gate(
                sandbox,
                test_command,
                timeout_s=self.config.command_timeout_s,
                cache=self.baselines,
                cache_key=baseline_key(workspace.base_commit, test_command or "", image_identity(self.docker, image)),
                emit=self.emit,
                unavailable=environment.error if failed and environment is not None else None,
            )
            # The baseline runs in the sandbox while the host packs the repository: it costs the first request
            # nothing it would not have waited for anyway.
            retry = RetryPolicy(self.config.llm, on_retry=lambda message: self.emit(Retry(message=message)))
            pool = ThreadPoolExecutor(max_workers=1)
            try:
                baseline = pool.submit(gate.baseline)
                system = system_prompt(workspace.path, pack_options(self.config, task, self.server_url), retry)
                baseline.result()
            finally:  # a stop signal must not wait for the suite: leaving the sandbox ends its command
                pool.shutdown(wait=False, cancel_futures=True)
            loop = self.loop = AgentLoop(
                self.model, self.registry, context, max_turns=self.config.max_turns, emit=self.emit
            )
            result = loop.run(system, task_prompt(task, test_command))
            return self._gate(gate, loop, result, workspace)

    def _tool_mounts(self) -> list[Path]:
        """The symbol tools' helper and libraries, which the ledger uses too (read-only, see tools/symbols.py)."""
        return sandbox_mounts() if self.config.symbol_tools or self.config.ledger else []

    def _gate(
        self, gate: Gate, loop: AgentLoop, result: LoopResult, workspace: Workspace
    ) -> tuple[LoopResult, GateRecord]:
        """Check the finished work; on regressions ask for a repair, at most --repair-rounds times. Work that a
        repair round left unfinished (turn limit, model error) is checked once more as it stands."""
        record = GateRecord(baseline=gate.baseline_run)
        while result.outcome in ("finished", "stopped") or record.repair_rounds:
            changed = workspace.changed_paths()
            record.check = gate.check(changed, partial(workspace.file_at, limit=MAX_CHECKED_BYTES)) if changed else None
            finished = result.outcome in ("finished", "stopped")
            if record.check is None or record.check.verdict != "regressed" or not finished:
                break
            if record.repair_rounds >= self.config.repair_rounds:
                break
            record.repair_rounds += 1
            self.emit(Repair(round=record.repair_rounds, reason=record.check.reason))
            result = loop.resume(repair_message(record.check))
        return result, record

    def _save_patch(self, workspace: Workspace, outcome: TaskSummary) -> None:
        diff = workspace.diff(max_bytes=PATCH_MAX_BYTES)
        outcome.uncommitted_files = workspace.uncommitted_files
        full_change = f"commit {outcome.commit} on {outcome.branch}" if outcome.commit else None
        header = f"task {outcome.index}: {outcome.task}"
        self.journal.append_patch(header, diff.data, total_bytes=diff.total_bytes, full_change=full_change)

    def _settle(
        self, workspace: Workspace, outcome: TaskSummary, result: LoopResult, record: GateRecord
    ) -> TaskSummary:
        """The run hook: verdict, commit and patch happen here, outside the loop. Work the gate checked is
        committed whatever its verdict (nothing the model did is thrown away); the trailers carry the evidence."""
        outcome.turns = result.turns
        outcome.summary = result.summary
        outcome.reason = result.reason
        check = record.check
        failed = result.outcome in ("max_turns", "error") and check is None
        if not failed:
            trailers = self._trailers()
            if check is not None:
                outcome.tests = _evidence(record, check)
                outcome.reason = f"{result.reason}; gate: {check.reason}"
                trailers["Refactor-Agent-Verdict"] = check.verdict
                evidence = evidence_trailer(record.baseline, check.final)
                if evidence:
                    trailers["Refactor-Agent-Tests"] = evidence
            message = result.summary.strip() or f"refactor-agent: {outcome.task}"
            outcome.commit = workspace.commit(message, trailers)
        # After the commit, so a cut patch can name it; a commit that fails still gets the patch (run_task).
        self._save_patch(workspace, outcome)
        outcome.status = "failed" if failed else "committed" if outcome.commit else "no_changes"
        if failed:
            outcome.verdict = "failed"
        else:
            outcome.verdict = check.verdict if check is not None and outcome.commit else "no_changes"
        return outcome
