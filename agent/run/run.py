"""One run: the night's tasks (of one repository, or several), each in its own worktree and container, through
the stages of agent/run/stages/ (workspace, baseline, loop, gate, settle); side effects (commit, patch) after the loop.

The tasks go one after the other here (InOrder) unless a TaskDispatch says otherwise: in parallel over a fleet of
servers (agent/dispatch/fleet.py) or as Ray tasks on other machines (agent/dispatch/ray_head.py).

A task that fails for any reason is recorded and the next task still runs: a crash at 3 a.m. costs one task,
not the night. A stop signal (SIGINT, SIGTERM, SIGHUP) ends the run early, and the deadline ends the task in
flight: either way that task keeps its diff (patch.diff, and a commit marked interrupted or timed_out on its
branch), and the run's containers and worktrees are removed. After each tool call the task's files are kept on a
wip ref, and every step is in the transcript, so a run that was killed outright (kill -9, a reboot) can be
resumed: finished tasks are skipped, the task in flight goes on from its last completed step.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

import docker
import git
import httpx

from agent.environment.stage import ENV_BUILD_LOG, prepare_environment
from agent.gate.baseline import BaselineCache, baseline_key, image_identity
from agent.gate.stage import Gate, GateRecord
from agent.gate.test_command import choose_test_command
from agent.loop import AgentLoop, LoopResult
from agent.prompt import pack_options, system_prompt, task_prompt
from agent.protocol.config import NightConfig, RunConfig
from agent.protocol.events import (
    EnvironmentProgress,
    EnvironmentReady,
    Event,
    Retry,
    RunEnd,
    RunStart,
    TaskEnd,
    TaskStart,
    ToolResultEvent,
)
from agent.protocol.model import ChatModel
from agent.protocol.records import EnvironmentRecord, RunSummary, TaskSummary, now_iso
from agent.protocol.stats import RequestStats, SpecCounters
from agent.record.journal import RunJournal
from agent.record.metrics import speculation_warning, summarize
from agent.record.progress import RESTARTED_MESSAGE, RunProgress, TaskProgress
from agent.run.interrupt import Interrupted
from agent.run.stages.gate import gate_with_repairs
from agent.run.stages.settle import already_committed, save_patch, settle, settle_unfinished
from agent.run.stages.workspace import RepoState, open_workspace, state_git
from agent.run.time_limit import TIME_UP_MESSAGE, TimeUp, grace_start, time_limit, wait_in_time
from agent.server.api import LlamaServerAPI, ServerError
from agent.server.chat import RetryPolicy
from agent.server.kv_cache import PrefixCache, prefix_cached
from agent.server.metrics import scrape_spec_counters, speculation_configured
from agent.settings.durations import format_duration
from agent.worktree.leftovers import create_run_scratch, remove_run_scratch
from agent.worktree.safe_git import GitError
from agent.worktree.workspace import Workspace, wip_ref
from sandbox import DockerSandbox, SandboxLimits, SandboxLost, remove_run_containers
from tools.base import ToolContext
from tools.ledger import Ledger, old_names_in
from tools.registry import default_registry
from tools.symbols import sandbox_mounts

Emit = Callable[[Event], None]


class TaskDispatch(Protocol):
    """How a run's tasks are executed: the narrow hook for a fleet of servers (agent/dispatch/fleet.py) and for
    Ray (agent/dispatch/ray_head.py). `run_tasks` gets the tasks still to do as (index, settings, task) and yields each
    task's outcome as it ends, in any order; each repository is prepared (`Run.prepare_repository`) before its
    first task runs here."""

    def run_tasks(self, run: Run, tasks: list[tuple[int, RunConfig, str]]) -> Iterator[TaskSummary]: ...


class InOrder:
    """The default: here, one task after the other, on the run's own model and server."""

    def run_tasks(self, run: Run, tasks: list[tuple[int, RunConfig, str]]) -> Iterator[TaskSummary]:
        for index, config, task in tasks:
            run.prepare_repository(config)
            yield run.run_task(index, config, task)


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


def _time_notice(end: float | None) -> Callable[[], str | None]:
    """The loop's notice: once, the time-is-up message when the task is within its grace period."""
    if end is None:
        return lambda: None
    due = grace_start(time.time(), end)
    sent = False

    def notice() -> str | None:
        nonlocal sent
        if sent or time.time() < due:
            return None
        sent = True
        return TIME_UP_MESSAGE

    return notice


def _tool_mounts(config: RunConfig) -> list[Path]:
    """The symbol tools' helper and libraries, which the ledger uses too (read-only, see tools/symbols.py)."""
    return sandbox_mounts() if config.symbol_tools or config.ledger else []


class Run:
    def __init__(
        self,
        night: NightConfig | RunConfig,
        *,
        repos: dict[Path, git.Repo],
        docker_client: docker.DockerClient | None,
        model: ChatModel,
        server_url: str | None,
        journal: RunJournal,
        observe: Emit,
        progress: RunProgress | None = None,
        previous: RunSummary | None = None,
        dispatch: TaskDispatch | None = None,
        slot: int = 0,
    ) -> None:
        """docker_client is None only where no task runs here (the head of a Ray run). slot: the server slot the
        model's requests are pinned to, whose saved prefixes the run manages."""
        self.night = night if isinstance(night, NightConfig) else NightConfig(repos=[night], runs_dir=night.runs_dir)
        self.dispatch = dispatch or InOrder()
        self.docker = docker_client
        self.model = model
        self.server_url = server_url
        self.journal = journal
        self.observe = observe
        self.progress = progress  # of the run being resumed, None for a new one
        self.previous = previous
        # None: a scripted model with no server (`eval --oracle`): tokens are estimated, no metrics are scraped.
        self.server_api = LlamaServerAPI(server_url) if server_url else None
        # Every request of the run, across resumes: the run's metrics are over all of them.
        self.requests: list[RequestStats] = list(progress.requests) if progress is not None else []
        self.baselines = BaselineCache(self.night.runs_dir)
        self.repos = {
            path: RepoState(repo, Path(repo.git.rev_parse("--path-format=absolute", "--git-common-dir")))
            for path, repo in repos.items()
        }
        # Saved prefixes: a task whose repository prefix was prefilled before (tonight or another night) restores it.
        server_cache = (
            PrefixCache.for_server(self.server_api, settings=self.night.repos[0].llm.effort, notify=self.emit)
            if self.server_api is not None
            else None
        )
        self.prefix_cache = server_cache.for_slot(slot) if server_cache is not None and slot else server_cache
        self.loop: AgentLoop | None = None  # the task's loop, so an interrupted task still reports its turns
        self.workspace: Workspace | None = None  # the task's, while its loop runs: snapshots after each tool call
        self.stopped_by: Interrupted | None = None
        self.current_task: int | None = None
        self.summary: RunSummary | None = None  # while execute runs: environments are recorded in it
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
        # The task's model restores and saves prefixes itself, in whichever slot of whichever server it is given
        # (FleetModel): the run's own cache is its slot 0's.
        view.prefix_cache = None
        # Its own snapshots: the task's workspace, loop and index are never another task's.
        view.loop, view.workspace, view.current_task, view.stopped_by = None, None, None, None
        return view

    def emit(self, event: Event) -> None:
        """Every event of a task carries its index, whoever made it (the loop, the gate, the model client)."""
        if event.task is None and self.current_task is not None:
            event = event.model_copy(update={"task": self.current_task})
        if isinstance(event, ToolResultEvent) and self.workspace is not None:
            # Before the result is journaled: a result in the transcript always has its files kept (resume).
            self.workspace.snapshot(wip_ref(self.journal.run_id, self.current_task or 0))
        self.journal.record(event)
        self.observe(event)

    def _new_summary(self) -> RunSummary:
        repositories = [str(path) for path in self.night.repositories()]
        return RunSummary(
            run_id=self.journal.run_id,
            repo=repositories[0],
            repos=repositories,
            model=self.model.name,
            server_url=self.server_url or "none (scripted model)",
            speculation_configured=self.speculation,
        )

    def execute(self) -> RunSummary:
        started = time.monotonic()
        summary = self.summary = self.previous or self._new_summary()
        already = summary.wall_time_s
        if self.progress is not None:  # the transcript is the record of what finished
            summary.tasks = list(self.progress.finished)
            summary.resumed += 1
            summary.status, summary.ended_at, summary.interrupted_by, summary.error = "running", None, None, None
        done = {task.index for task in summary.tasks}
        self._drop_settled_snapshots(done)
        try:
            self.emit(RunStart(run_id=self.journal.run_id, tasks=len(self.night.tasks())))
            self.journal.write_summary(summary)
            counters_at_start = _spec_counters(self.server_api)
            numbered = [(index, config, task) for index, (config, task) in enumerate(self.night.tasks(), start=1)]
            for outcome in self.dispatch.run_tasks(self, [entry for entry in numbered if entry[0] not in done]):
                summary.tasks = sorted([*summary.tasks, outcome], key=lambda task: task.index)
                run_delta = _delta(_spec_counters(self.server_api), counters_at_start)
                _measure(summary, self.requests, run_delta, self.speculation)
                summary.wall_time_s = round(already + time.monotonic() - started, 3)
                if self.stopped_by is not None:
                    break
                self.journal.write_summary(summary)
        except Interrupted as stop:  # between tasks, or while a task was being set up
            self.stopped_by = stop
        except Exception as error:  # outside any task (a repository's preparation): the run failed, said so
            summary.error = f"{error.__class__.__name__}: {error}"
        finally:
            # From here on further stop signals are ignored (agent.run.interrupt), so these steps always finish.
            summary.ended_at = now_iso()
            summary.status = "failed" if summary.error is not None else "completed"
            summary.wall_time_s = round(already + time.monotonic() - started, 3)
            if self.stopped_by is not None:
                summary.status, summary.interrupted_by = "interrupted", self.stopped_by.signal_name
                with contextlib.suppress(Exception):  # the signal may have landed while one was being made
                    self.remove_containers()
            self.journal.write_summary(summary)
            self.remove_scratch()
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

    def _drop_settled_snapshots(self, done: set[int]) -> None:
        """A kill between a task's record and the deletion of its wip ref leaves the ref behind: delete it now."""
        for index, (config, _task) in enumerate(self.night.tasks(), start=1):
            if index in done:
                with contextlib.suppress(GitError):
                    state_git(self.repos[config.repo]).run("update-ref", "-d", wip_ref(self.journal.run_id, index))

    def _task_end(self, config: RunConfig) -> tuple[float, str] | None:
        """When a task starting now must end (time.time()), and why: the night's deadline or its own
        --task-timeout, the earlier."""
        ends = []
        if self.night.deadline_at is not None:
            ends.append((self.night.deadline_at.timestamp(), "deadline"))
        if config.task_timeout_s is not None:
            ends.append(
                (time.time() + config.task_timeout_s, f"--task-timeout {format_duration(config.task_timeout_s)}")
            )
        return min(ends) if ends else None

    def _skip_reason(self) -> str | None:
        if self.night.deadline_at is None:
            return None
        left = self.night.deadline_at.timestamp() - time.time()
        if left < self.night.min_task_time_s:
            return (
                f"deadline: {format_duration(left)} left at {now_iso()}, less than --min-task-time "
                f"{format_duration(self.night.min_task_time_s)}"
            )
        return None

    def prepare_repository(self, config: RunConfig) -> None:
        """Before a repository's first task here: its scratch directory, and its environment image (reused or
        built) unless the deadline leaves no task to start."""
        state = self.repos[config.repo]
        if state.scratch is None:
            state.scratch = create_run_scratch(self.journal.run_id, state.git_dir)
        if state.environment is not None or self._skip_reason() is not None:
            return
        single = len(self.repos) == 1
        log_name = ENV_BUILD_LOG if single else f"env-build-{config.repo.name}.log"
        record = prepare_environment(
            state.repo,
            client=self.docker,
            sandbox_image=config.image,
            image_explicit=config.image_explicit,
            spec=config.environment,
            test_command=config.test_cmd,
            log_path=self.journal.directory / log_name,
            progress=lambda message: self.emit(EnvironmentProgress(message=message)),
            allowed_base_images=config.allowed_base_images,
            deadline=self.night.deadline_at.timestamp() if self.night.deadline_at is not None else None,
        )
        self.record_environment(config, record)

    def record_environment(self, config: RunConfig, record: EnvironmentRecord) -> None:
        """A repository's environment, prepared here or (Ray) on the node that ran its first task."""
        state = self.repos[config.repo]
        state.environment = record.model_copy(update={"repo": str(config.repo)})
        self.emit(EnvironmentReady(record=state.environment))
        if self.summary is not None:
            earlier = [each for each in self.summary.environments if each.repo != state.environment.repo]
            self.summary.environments = [*earlier, state.environment]
            self.journal.write_summary(self.summary)

    def run_task(self, index: int, config: RunConfig, task: str) -> TaskSummary:
        """The stages of one task: workspace, then in its sandbox baseline and loop and gate, then settle."""
        started = time.monotonic()
        self.current_task = index
        skipped = self._skip_reason()
        if skipped is not None:
            outcome = TaskSummary(
                index=index, task=task, repo=str(config.repo), status="skipped", verdict="skipped", reason=skipped
            )
            self.emit(TaskEnd(outcome=outcome))
            return outcome
        state = self.repos[config.repo]
        resumed = self.progress.in_flight.get(index) if self.progress is not None else None
        workspace = open_workspace(
            state,
            run_id=self.journal.run_id,
            index=index,
            task=task,
            max_file_bytes=config.max_file_bytes,
            resumed=resumed,
        )
        self.emit(
            TaskStart(
                text=task,
                branch=workspace.branch or "",
                repo=str(config.repo),
                base_commit=workspace.base_commit,
                resumed=resumed is not None,
            )
        )
        outcome = TaskSummary(
            index=index,
            task=task,
            repo=str(config.repo),
            status="failed",
            reason="",
            branch=workspace.branch,
            base_commit=workspace.base_commit,
        )
        self.loop = None
        counters_before = _spec_counters(self.server_api)
        try:
            if workspace.head() != workspace.base_commit:  # settled before the process died: not done twice
                return already_committed(self.journal, workspace, outcome)
            end = self._task_end(config)
            with time_limit(*end) if end is not None else contextlib.nullcontext():
                result, check = self._in_sandbox(workspace, config, task, resumed, end)
            self.loop = None  # its turns and requests are in the result from here on
            self.requests += result.requests
            task_delta = _delta(_spec_counters(self.server_api), counters_before)
            _measure(outcome, result.requests, task_delta, self.speculation)
            outcome = settle(self.journal, workspace, outcome, result, check, self._trailers())
        except TimeUp as up:
            self._settle_unfinished(workspace, outcome, "timed_out", f"{up.reason}: stopped at {now_iso()}")
        except Interrupted as stop:
            self.stopped_by = stop
            self._settle_unfinished(workspace, outcome, "interrupted", f"interrupted by {stop.signal_name}")
        except Exception as error:  # the next task still deserves its chance
            # A sandbox that vanished and could not be replaced names itself; anything else is our fault.
            lost = isinstance(error, SandboxLost)
            outcome.reason = str(error) if lost else f"internal error: {error.__class__.__name__}: {error}"
            with contextlib.suppress(Exception):  # keep what the model did so far for the morning
                save_patch(self.journal, workspace, outcome)
        finally:
            self.workspace = None
            outcome.wall_time_s = round(time.monotonic() - started, 3)
            self.emit(TaskEnd(outcome=outcome))
            with contextlib.suppress(Exception):  # settled (task_end is written): the snapshots served their turn
                workspace.drop_ref(wip_ref(self.journal.run_id, index))
            workspace.remove()
        return outcome

    def _settle_unfinished(self, workspace: Workspace, outcome: TaskSummary, status: str, reason: str) -> None:
        """A task stopped before its end (interrupted, timed_out): its turns so far, then settled as it stands."""
        outcome.status = outcome.verdict = status  # type: ignore[assignment]
        outcome.reason = reason
        if self.loop is not None:
            outcome.turns = self.loop.turn
            self.requests += self.loop.requests
            _measure(outcome, self.loop.requests, None, self.speculation)
        settle_unfinished(self.journal, workspace, outcome, status, self._trailers())

    def remove_scratch(self) -> None:
        """The run's worktrees (its branches are kept)."""
        for state in self.repos.values():
            if state.scratch is not None:
                remove_run_scratch(state.scratch, state.git_dir)
                state.scratch = None

    def remove_containers(self) -> None:
        if self.docker is not None:
            remove_run_containers(self.docker, self.journal.run_id)

    def _trailers(self) -> dict[str, str]:
        return {"Refactor-Agent-Run": self.journal.run_id, "Refactor-Agent-Model": self.model.name}

    def _in_sandbox(
        self,
        workspace: Workspace,
        config: RunConfig,
        task: str,
        resumed: TaskProgress | None,
        end: tuple[float, str] | None,
    ) -> tuple[LoopResult, GateRecord]:
        chosen = choose_test_command(config.test_cmd, workspace.path)
        test_command = chosen.command if chosen is not None else None
        limits = SandboxLimits(command_timeout_s=config.command_timeout_s)
        environment = self.repos[config.repo].environment
        image = environment.image_for_tasks(config.image) if environment is not None else config.image
        with DockerSandbox(
            image,
            workspace.path,
            run_id=self.journal.run_id,
            limits=limits,
            client=self.docker,
            read_only_paths=[workspace.git_common_dir, *_tool_mounts(config)],
        ) as sandbox:
            context = ToolContext(
                executor=sandbox,
                test_command=test_command,
                command_timeout_s=config.command_timeout_s,
                output_chars=config.tool_output_chars,
                ledger=Ledger(old_names_in(task)) if config.ledger else None,
            )
            gate = Gate(
                sandbox,
                test_command,
                timeout_s=config.command_timeout_s,
                cache=self.baselines,
                cache_key=baseline_key(workspace.base_commit, test_command or "", image_identity(self.docker, image)),
                emit=self.emit,
                unavailable=environment.unavailable() if environment is not None else None,
            )
            # The baseline runs in the sandbox while the host packs the repository: it costs the first request
            # nothing it would not have waited for anyway.
            retry = RetryPolicy(config.llm, on_retry=lambda message: self.emit(Retry(message=message)))
            pool = ThreadPoolExecutor(max_workers=1)
            try:
                baseline = pool.submit(gate.baseline)
                if resumed is None or not resumed.messages:
                    system = system_prompt(workspace.path, pack_options(config, task, self.server_url), retry)
                wait_in_time(baseline)  # the task's TimeUp must not wait for the whole suite
            finally:  # a stop signal must not wait for the suite: leaving the sandbox ends its command
                pool.shutdown(wait=False, cancel_futures=True)
            loop = self.loop = AgentLoop(
                prefix_cached(self.model, self.prefix_cache),
                default_registry(symbol_tools=config.symbol_tools, ledger=config.ledger),
                context,
                max_turns=config.max_turns,
                emit=self.emit,
                max_tokens=config.max_tokens_per_task,
                notice=_time_notice(end[0] if end is not None else None),
            )
            self.workspace = workspace
            if resumed is not None and resumed.messages:
                loop.requests = list(resumed.requests)
                result = loop.continue_from(
                    resumed.messages, turn=resumed.turn, recorded=resumed.recorded, message=RESTARTED_MESSAGE
                )
            else:
                result = loop.run(system, task_prompt(task, test_command))
            self.workspace = None
            return gate_with_repairs(gate, loop, result, workspace, repair_rounds=config.repair_rounds, emit=self.emit)
