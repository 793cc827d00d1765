"""`review rebase`: a run's verified branches replayed onto another commit in scratch worktrees, the gate run again
there (the suite on the new base, then with the change), and the branches tried against each other.

Each branch goes through the refresh stage (agent/run/stages/refresh.py), in the run's environment as the new base
needs it: the environment stage resolves it from the new base's committed tree with the run's settings, so the
run's image is reused when the dependencies are the same and a new one is built from the new base's digest when
they changed.

Nothing moves unless asked: the rebased commits live only in the object store until `apply` points a task
branch at one, and only a branch that rebased cleanly and is verified on the new base.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from itertools import combinations

from pydantic import BaseModel

from agent.gate.baseline import BaselineCache
from agent.protocol.config import RunConfig
from agent.protocol.events import Baseline, Event, GateEvent
from agent.protocol.records import EnvironmentRecord
from agent.review.records import RunRecord
from agent.review.repository import UserRepository
from agent.run.sandboxes import Sandboxes
from agent.run.stages.refresh import BranchTrial, refresh
from agent.worktree.safe_git import GitError
from agent.worktree.workspace import Workspace, WorkspaceError

Log = Callable[[str], None]


class PairConflict(BaseModel):
    first: str
    second: str
    files: list[str]


class RebaseReport(BaseModel):
    run_id: str
    onto: str
    onto_commit: str
    environment: EnvironmentRecord | None = None  # the run's environment as the new base needs it
    branches: list[BranchTrial] = []
    conflicting_pairs: list[PairConflict] = []


class Rebaser:
    def __init__(
        self, record: RunRecord, repository: UserRepository, config: RunConfig, sandboxes: Sandboxes, log: Log
    ) -> None:
        self.record = record
        self.repository = repository
        self.config = config
        self.sandboxes = sandboxes
        self.log = log
        self.cache = BaselineCache(record.directory.parent)
        self.environment: EnvironmentRecord | None = None

    def prepare(self, onto: str) -> EnvironmentRecord:
        """The run's environment for the new base, by the environment stage's own reuse-or-build."""
        self.environment = self.sandboxes.environment(
            self.repository.repo,
            self.config,
            log_path=self.record.directory / f"env-build-rebase-{onto[:12]}.log",
            progress=self.log,
            deadline=None,
            revision=onto,
        )
        self.log(f"environment on the new base: {self.environment.status} {self.environment.image}")
        return self.environment

    def _scratch(self, commit: str, label: str) -> Workspace:
        return Workspace.detached(self.repository.repo, commit, label=label, max_file_bytes=self.config.max_file_bytes)

    def _gate_event(self, branch: str, event: Event) -> None:
        if isinstance(event, Baseline):
            self.log(f"{branch}: baseline on the new base: {event.result}" + (" (cached)" if event.cached else ""))
        elif isinstance(event, GateEvent):
            self.log(f"{branch}: after rebase: {event.verdict}: {event.reason}")

    def trial(self, task: int, branch: str, onto: str) -> BranchTrial:
        tip = self.repository.tip(branch)
        if tip is None:
            return BranchTrial(task=task, branch=branch, outcome="gone", reason="the branch no longer exists")
        return refresh(
            repo=self.repository.repo,
            sandboxes=self.sandboxes,
            environment=self.environment or self.prepare(onto),
            config=self.config,
            task=task,
            branch=branch,
            tip=tip,
            onto=onto,
            commits=self.repository.commits_onto(onto, tip),
            cache=self.cache,
            run_id=f"review-{self.record.run_id}",
            emit=partial(self._gate_event, branch),
        )

    def pair_conflict(self, first: BranchTrial, second: BranchTrial, onto: str) -> PairConflict | None:
        """Apply one rebased branch, then the other, in a scratch worktree."""
        assert first.rebased_commit and second.rebased_commit
        workspace = self._scratch(first.rebased_commit, f"{first.branch} + {second.branch}")
        try:
            files = workspace.replay(self.repository.commits_onto(onto, second.rebased_commit))
        finally:
            workspace.remove()
        return PairConflict(first=first.branch, second=second.branch, files=files) if files else None

    def run(self, onto_ref: str, *, apply: bool) -> RebaseReport:
        onto = self.repository.resolve(onto_ref)
        report = RebaseReport(run_id=self.record.run_id, onto=onto_ref, onto_commit=onto)
        candidates = [task for task in self.record.summary.tasks if task.verdict == "verified"]
        if candidates:
            report.environment = self.prepare(onto)
        for task in candidates:
            if task.verdict == "verified" and task.branch and task.commit:
                self.log(f"{task.branch}: rebasing onto {onto_ref} ({onto[:12]})")
                report.branches.append(self.trial(task.index, task.branch, onto))
        applied = [trial for trial in report.branches if trial.rebased_commit]
        for first, second in combinations(applied, 2):
            conflict = self.pair_conflict(first, second, onto)
            if conflict is not None:
                report.conflicting_pairs.append(conflict)
        if apply:
            for trial in report.branches:
                self._apply(trial)
        return report

    def _apply(self, trial: BranchTrial) -> None:
        """Point a branch verified on the new base at its rebased commit; one that cannot move says why and the
        rest go on."""
        if trial.outcome != "clean" or not trial.rebased_commit or not trial.commit:
            return
        if trial.verdict != "verified":
            trial.not_moved = f"not verified on the new base ({trial.verdict}: {trial.reason})"
            return
        try:
            self.repository.move(trial.branch, trial.rebased_commit, trial.commit)
            trial.moved = True
        except (WorkspaceError, GitError) as error:
            trial.not_moved = str(error)
