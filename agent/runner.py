"""One run: tasks in order, each in its own worktree and container; side effects (commit, patch) after the loop.

A task that fails for any reason is recorded and the next task still runs: a crash at 3 a.m. costs one task,
not the night. Only Ctrl-C stops the run, after cleaning up the current task.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import docker
import git
import httpx

from agent.config import RunConfig
from agent.context import pack_options, system_prompt, task_prompt
from agent.journal import RunJournal
from agent.llama_api import LlamaServerAPI, ServerError
from agent.llm import ChatModel, RequestStats
from agent.loop import AgentLoop, LoopResult
from agent.metrics import SpecCounters, scrape_spec_counters, speculation_configured, speculation_warning, summarize
from agent.report import RunSummary, TaskSummary
from agent.workspace import Workspace
from sandbox import DockerSandbox, SandboxLimits
from tools import ToolContext, default_registry
from tools.test_command import detect_test_command

Emit = Callable[[dict[str, Any]], None]


def _spec_counters(api: LlamaServerAPI) -> SpecCounters | None:
    """Metrics are for the report: a server that cannot give them must not fail the task."""
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


class Run:
    def __init__(
        self,
        config: RunConfig,
        *,
        repo: git.Repo,
        docker_client: docker.DockerClient,
        model: ChatModel,
        server_url: str,
        journal: RunJournal,
        observe: Emit,
    ) -> None:
        self.config = config
        self.repo = repo
        self.docker = docker_client
        self.model = model
        self.server_url = server_url
        self.journal = journal
        self.observe = observe
        self.registry = default_registry()
        self.server_api = LlamaServerAPI(server_url)
        self.requests: list[RequestStats] = []
        try:
            self.speculation = speculation_configured(self.server_api)
        except (ServerError, httpx.HTTPError):
            self.speculation = False

    def emit(self, event: dict[str, Any]) -> None:
        self.journal.record(event)
        self.observe(event)

    def execute(self) -> RunSummary:
        started = time.monotonic()
        summary = RunSummary(
            run_id=self.journal.run_id,
            repo=str(self.config.repo),
            model=self.model.name,
            server_url=self.server_url,
            speculation_configured=self.speculation,
        )
        self.emit({"type": "run_start", "run_id": self.journal.run_id, "tasks": len(self.config.tasks)})
        counters_at_start = _spec_counters(self.server_api)
        try:
            for index, task in enumerate(self.config.tasks, start=1):
                summary.tasks.append(self.run_task(index, task))
                run_delta = _delta(_spec_counters(self.server_api), counters_at_start)
                _measure(summary, self.requests, run_delta, self.speculation)
                summary.wall_time_s = round(time.monotonic() - started, 3)
                self.journal.write_summary(summary)
        finally:
            self.server_api.close()
            self.emit({"type": "run_end", "exit_code": summary.exit_code, "wall_time_s": summary.wall_time_s})
        return summary

    def run_task(self, index: int, task: str) -> TaskSummary:
        started = time.monotonic()
        workspace = Workspace.create(self.repo, run_id=self.journal.run_id, task=f"{index}-{task}")
        self.emit({"type": "task_start", "index": index, "task": task, "branch": workspace.branch})
        outcome = TaskSummary(
            index=index,
            task=task,
            status="failed",
            reason="",
            branch=workspace.branch,
            base_commit=workspace.base_commit,
        )
        counters_before = _spec_counters(self.server_api)
        try:
            result = self._run_loop(workspace, task)
            self.requests += result.requests
            task_delta = _delta(_spec_counters(self.server_api), counters_before)
            _measure(outcome, result.requests, task_delta, self.speculation)
            outcome = self._settle(workspace, outcome, result)
        except KeyboardInterrupt:
            outcome.reason = "interrupted (Ctrl-C)"
            raise
        except Exception as error:  # the next task still deserves its chance
            outcome.reason = f"internal error: {error.__class__.__name__}: {error}"
            with contextlib.suppress(Exception):  # keep what the model did so far for the morning
                self._save_patch(workspace, outcome)
        finally:
            outcome.wall_time_s = round(time.monotonic() - started, 3)
            self.emit({"type": "task_end", **outcome.model_dump(mode="json")})
            workspace.remove()
        return outcome

    def _run_loop(self, workspace: Workspace, task: str) -> LoopResult:
        test_command = self.config.test_cmd or detect_test_command(workspace.path)
        limits = SandboxLimits(command_timeout_s=self.config.command_timeout_s)
        with DockerSandbox(
            self.config.image,
            workspace.path,
            run_id=self.journal.run_id,
            limits=limits,
            client=self.docker,
            read_only_paths=[workspace.git_common_dir],
        ) as sandbox:
            context = ToolContext(
                executor=sandbox,
                test_command=test_command,
                command_timeout_s=self.config.command_timeout_s,
                output_chars=self.config.tool_output_chars,
            )
            loop = AgentLoop(self.model, self.registry, context, max_turns=self.config.max_turns, emit=self.emit)
            system = system_prompt(workspace.path, pack_options(self.config, task, self.server_url))
            return loop.run(system, task_prompt(task, test_command))

    def _save_patch(self, workspace: Workspace, outcome: TaskSummary) -> None:
        self.journal.append_patch(f"task {outcome.index}: {outcome.task}", workspace.diff())

    def _settle(self, workspace: Workspace, outcome: TaskSummary, result: LoopResult) -> TaskSummary:
        """The run hook: patch and commit happen here, outside the loop."""
        outcome.turns = result.turns
        outcome.summary = result.summary
        outcome.reason = result.reason
        self._save_patch(workspace, outcome)
        if result.outcome in ("max_turns", "error"):
            outcome.status = "failed"
            return outcome
        message = result.summary.strip() or f"refactor-agent: {outcome.task}"
        outcome.commit = workspace.commit(
            message, {"Refactor-Agent-Run": self.journal.run_id, "Refactor-Agent-Model": self.model.name}
        )
        outcome.status = "committed" if outcome.commit else "no_changes"
        return outcome
