"""One run: the night's tasks (of one repository, or several), each in its own worktree and sandbox, through the
stages of agent/run/stages/ (workspace, baseline, loop, gate, settle); side effects (commit, patch) after the loop.

Its dispatch runs the tasks: one after the other (agent/dispatch/in_order.py), in parallel over a fleet of servers
(agent/dispatch/fleet.py) or as Ray tasks on other machines (agent/dispatch/ray_head.py).

A task that fails for any reason is recorded and the next task still runs: a crash at 3 a.m. costs one task,
not the night. A stop signal (SIGINT, SIGTERM, SIGHUP) ends the run early, and the deadline ends the task in
flight: either way that task keeps its diff (patch.diff, and a commit marked interrupted or timed_out on its
branch), and the run's containers and worktrees are removed. After each tool call the task's files are kept on a
wip ref, and every step is in the transcript, so a run that was killed outright (kill -9, a reboot) can be
resumed: finished tasks are skipped, the task in flight goes on from its last completed step.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import git

from agent.environment.stage import ENV_BUILD_LOG
from agent.gate.baseline import BaselineCache
from agent.nights.tonight import NightTasks
from agent.protocol.config import NightConfig, RunConfig
from agent.protocol.events import EnvironmentProgress, EnvironmentReady, Event, RunEnd, RunStart
from agent.protocol.model import ChatModel
from agent.protocol.records import EnvironmentRecord, RunSummary, TaskSummary, now_iso
from agent.protocol.stats import RequestStats, SpecCounters
from agent.record.journal import RunJournal
from agent.record.metrics import delta, measure
from agent.record.progress import RunProgress
from agent.run.interrupt import Interrupted
from agent.run.sandboxes import Sandboxes
from agent.run.stages.pipeline import run_task
from agent.run.stages.task import TaskContext
from agent.run.stages.workspace import RepoState, state_git
from agent.run.time_limit import skip_reason
from agent.server.api import LlamaServerAPI
from agent.server.kv_cache import PrefixCache
from agent.server.metrics import SpeculationProbe
from agent.worktree.leftovers import create_run_scratch, remove_run_scratch
from agent.worktree.safe_git import GitError
from agent.worktree.workspace import wip_ref

Emit = Callable[[Event], None]


class TaskDispatch(Protocol):
    """How a run's tasks are executed: here one by one (agent/dispatch/in_order.py), over a fleet of servers
    (agent/dispatch/fleet.py) or on Ray (agent/dispatch/ray_head.py). `run_tasks` gets the tasks still to do as
    (index, settings, task) and yields each task's outcome as it ends, in any order; each repository is prepared
    (`Run.prepare_repository`) before its first task runs here."""

    def run_tasks(self, run: Run, tasks: list[tuple[int, RunConfig, str]]) -> Iterator[TaskSummary]: ...


@dataclass
class RunServer:
    """The llama-server a run's tasks talk to, with what the run keeps of it: its saved prefixes (the run's slot)
    and its speculative-decoding counters."""

    url: str
    api: LlamaServerAPI
    prefix_cache: PrefixCache | None
    probe: SpeculationProbe


class Run:
    """A run's records (journal, summary, requests, baselines, each repository's state) and its tasks, each through
    the stages of agent/run/stages/ (pipeline.py) as its dispatch runs them. Everything it works with is handed in
    by the composer (agent/run/compose.py)."""

    def __init__(
        self,
        night: NightConfig | RunConfig,
        *,
        repos: dict[Path, git.Repo],
        sandboxes: Sandboxes | None,
        model: ChatModel,
        server: RunServer | None,
        journal: RunJournal,
        observe: Emit,
        dispatch: TaskDispatch,
        progress: RunProgress | None = None,
        previous: RunSummary | None = None,
        tonight: NightTasks | None = None,
        served: dict[str, str | None] | None = None,
    ) -> None:
        """sandboxes is None only where no task runs here (the head of a Ray run); server None for a scripted model
        with no server (`eval --oracle`): tokens are estimated, no metrics are scraped. tonight: a named night's
        planned tasks (their base, trailer and publish), None for a one-off run. served: each server's model as its
        /props names it (agent.server.api.served_model), by URL."""
        self.night = night if isinstance(night, NightConfig) else NightConfig(repos=[night], runs_dir=night.runs_dir)
        self.dispatch = dispatch
        self._sandboxes = sandboxes
        self.model = model
        self.server = server
        self.journal = journal
        self.observe = observe
        self.progress = progress  # of the run being resumed, None for a new one
        self.previous = previous
        self.served = served or {}
        # Every request of the run, across resumes: the run's metrics are over all of them.
        self.requests: list[RequestStats] = list(progress.requests) if progress is not None else []
        self.baselines = BaselineCache(self.night.runs_dir)
        self.tonight = tonight
        self.repos = {
            path: RepoState(
                repo,
                Path(repo.common_dir).resolve(),  # as git's --path-format=absolute --git-common-dir, with no git
                base=tonight.bases.get(path) if tonight is not None else None,
            )
            for path, repo in repos.items()
        }
        self.current: TaskContext | None = None  # the task in flight on the run's own model (one at a time)
        self.stopped_by: Interrupted | None = None
        self.summary: RunSummary | None = None  # while execute runs: environments are recorded in it
        self.speculation = server is not None and server.probe.configured

    @property
    def sandboxes(self) -> Sandboxes:
        assert self._sandboxes is not None, "tasks run where the run has sandboxes"
        return self._sandboxes

    @property
    def server_url(self) -> str | None:
        return self.server.url if self.server is not None else None

    def served_model(self, url: str | None) -> str | None:
        """The model the server at `url` says it runs; None when it named none (or there is no server)."""
        return self.served.get(url) if url is not None else None

    def record(self, event: Event) -> None:
        """Into the journal, then to the observer (the live view)."""
        self.journal.record(event)
        self.observe(event)

    def emit(self, event: Event) -> None:
        """An event of the run, or of its own model (retries, prefill progress, saved prefixes): the latter belong
        to the task in flight on it."""
        if self.current is not None:
            self.current.emit(event)
        else:
            self.record(event)

    def new_task(
        self, index: int, config: RunConfig, task: str, *, server_url: str | None = None, parallel: bool = False
    ) -> TaskContext:
        """A task's own context: on the run's model, server and saved prefixes; or, `parallel` (a fleet's task),
        one whose model is its own (the dispatch sets it), whose tokens are counted on `server_url`, and whose
        metrics are estimated (the server's counters mix every task it serves)."""
        return TaskContext(
            index=index,
            config=config,
            task=task,
            run_id=self.journal.run_id,
            model=self.model,
            server_url=server_url or self.server_url,
            record=self.record,
            prefix_cache=None if parallel or self.server is None else self.server.prefix_cache,
            probe=None if parallel or self.server is None else self.server.probe,
            parallel=parallel,
        )

    def run_task(self, context: TaskContext) -> TaskSummary:
        """One task through its stages (agent/run/stages/pipeline.py)."""
        if not context.parallel:
            self.current = context
        try:
            return run_task(self, context)
        finally:
            if not context.parallel:
                self.current = None
                # One task at a time: a stop signal in it ends the run (a dispatch of tasks in parallel gets the
                # signal in its own thread).
                self.stopped_by = context.stopped_by or self.stopped_by

    def _new_summary(self) -> RunSummary:
        repositories = [str(path) for path in self.night.repositories()]
        return RunSummary(
            run_id=self.journal.run_id,
            repo=repositories[0],
            repos=repositories,
            model=self.model.name,
            served_model=self.served_model(self.server_url),
            server_url=self.server_url or "none (scripted model)",
            speculation_configured=self.speculation,
        )

    def _counters(self) -> SpecCounters | None:
        return self.server.probe.read() if self.server is not None else None

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
        if self.tonight is not None:  # a kill after a task's end and before its publish: published now
            summary.tasks = [
                self.tonight.publish(task, stopped=False) if task.key is None else task for task in summary.tasks
            ]
        try:
            deadline = self.night.deadline_at.timestamp() if self.night.deadline_at is not None else None
            served = self.served_model(self.server_url)
            self.emit(
                RunStart(
                    run_id=self.journal.run_id, tasks=len(self.night.tasks()), deadline_at=deadline, served_model=served
                )
            )
            self.journal.write_summary(summary)
            counters_at_start = self._counters()
            numbered = [(index, config, task) for index, (config, task) in enumerate(self.night.tasks(), start=1)]
            for outcome in self.dispatch.run_tasks(self, [entry for entry in numbered if entry[0] not in done]):
                if self.tonight is not None:  # in the main thread: publishes are one at a time
                    outcome = self.tonight.publish(outcome, stopped=self.stopped_by is not None)
                summary.tasks = sorted([*summary.tasks, outcome], key=lambda task: task.index)
                measure(summary, self.requests, delta(self._counters(), counters_at_start), self.speculation)
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
                    self.remove_sandboxes()
            self.journal.write_summary(summary)
            self.remove_scratch()
            if self.server is not None:
                self.server.api.close()
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

    def prepare_repository(self, config: RunConfig) -> None:
        """Before a repository's first task here: its scratch directory, and its environment image (reused or
        built) unless the deadline leaves no task to start."""
        state = self.repos[config.repo]
        if state.scratch is None:
            state.scratch = create_run_scratch(self.journal.run_id, state.git_dir)
        if state.environment is not None or skip_reason(self.night) is not None:
            return
        log_name = ENV_BUILD_LOG if len(self.repos) == 1 else f"env-build-{config.repo.name}.log"
        record = self.sandboxes.environment(
            state.repo,
            config,
            log_path=self.journal.directory / log_name,
            progress=lambda message: self.emit(EnvironmentProgress(message=message)),
            deadline=self.night.deadline_at.timestamp() if self.night.deadline_at is not None else None,
            revision=state.base or "HEAD",  # a named night's tasks start from the default branch, not HEAD
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

    def remove_scratch(self) -> None:
        """The run's worktrees (its branches are kept)."""
        for state in self.repos.values():
            if state.scratch is not None:
                remove_run_scratch(state.scratch, state.git_dir)
                state.scratch = None

    def remove_sandboxes(self) -> None:
        if self._sandboxes is not None:
            self._sandboxes.remove_run(self.journal.run_id)

    def trailers(self, index: int, served: str | None = None) -> dict[str, str]:
        """A task's commit trailers: the run, the model (the one its server runs, `served`, with the requested name
        beside it when the two differ), and a named night's task key."""
        trailers = {"Refactor-Agent-Run": self.journal.run_id, "Refactor-Agent-Model": served or self.model.name}
        if served is not None and served != self.model.name:
            trailers["Refactor-Agent-Model-Requested"] = self.model.name
        return {**trailers, **self.tonight.trailers(index)} if self.tonight is not None else trailers
