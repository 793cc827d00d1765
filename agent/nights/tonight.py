"""A named night's tasks while its run works on them: where each starts (the default branch's commit at plan time),
its Refactor-Agent-Task trailer, and its publish: a result replaces the task's stable branch (base + one commit,
never stacked), the previous tip stays on a history ref, the run's work branch goes; the record says what became of
it. A task interrupted by a stop is not published: its work branch stays for `resume`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import git

from agent.nights.history import history_ref
from agent.nights.identity import TASK_TRAILER
from agent.nights.plan import fresh_record, record_store
from agent.nights.publish import ZERO, branch_tip, checked_out, move_branch
from agent.nights.record import RecordStore
from agent.protocol.config import NightConfig
from agent.protocol.nights import NightOutcome, NightPlan, PendingMove, PlannedTask, TaskRecord, TaskRecordFile
from agent.protocol.records import TaskSummary
from agent.worktree.safe_git import GitError, SafeGit
from agent.worktree.workspace import user_git

UNFINISHED = frozenset({"timed_out", "interrupted"})


class NightTasks:
    """The planned tasks as a task's pipeline sees them, wherever it runs: each one's repository, base and plan entry,
    and its trailer. A Ray worker gets the one task it runs (agent/dispatch/ray_worker.py): its commit is the
    same as on the head, and its result is published by the head."""

    def __init__(self, by_index: dict[int, tuple[str, str, PlannedTask]]) -> None:
        self.by_index = by_index
        self.bases = {Path(repo): base for repo, base, _task in by_index.values()}

    def planned(self, index: int) -> PlannedTask:
        return self.by_index[index][2]

    def trailers(self, index: int) -> dict[str, str]:
        return {TASK_TRAILER: self.by_index[index][2].key}

    def publish(self, outcome: TaskSummary, *, stopped: bool) -> TaskSummary:
        return outcome  # a worker's: the head publishes


class Tonight(NightTasks):
    def __init__(
        self,
        plan: NightPlan,
        night: NightConfig,
        repos: dict[Path, git.Repo],
        hooks_dir: Path,
        log: Callable[[str], None],
    ) -> None:
        """`night`: the narrowed night the run works on (its tasks are the plan's run and rebase ones, in order)."""
        super().__init__(
            {
                task.index: (repo.repo, repo.base, task)
                for repo in plan.repos
                for task in repo.tasks
                if task.index is not None
            }
        )
        self.plan = plan
        self.night = night
        self.log = log
        self.git = {path: user_git(repo, hooks_dir) for path, repo in repos.items()}
        self.stores: dict[str, RecordStore] = {}
        self.fresh: dict[int, TaskRecord] = {}
        for index, ((config, _task), spec) in enumerate(zip(night.tasks(), night.specs, strict=True), start=1):
            _repo, _base, planned = self.by_index[index]
            self.fresh[index] = fresh_record(plan.night, config, spec, planned.branch, plan.run_id)
            if str(config.repo) not in self.stores:
                self.stores[str(config.repo)] = record_store(
                    night.runs_dir, repos[config.repo], self.git[config.repo], plan.night, {}, plan.run_id, log
                )

    def publish(self, outcome: TaskSummary, *, stopped: bool) -> TaskSummary:
        """The task's result onto its stable branch (see the module); the outcome then names that branch."""
        repo, base, planned = self.by_index[outcome.index]
        outcome.key = planned.key
        if stopped and outcome.status == "interrupted":
            return outcome  # resumed later, on its work branch
        safe_git, store = self.git[Path(repo)], self.stores[repo]
        fresh = self.fresh[outcome.index]
        stable_tip = branch_tip(safe_git, planned.branch)
        work = outcome.branch if outcome.branch and outcome.branch != planned.branch else None
        if outcome.status == "committed" and outcome.commit is not None:
            if stable_tip == outcome.commit:  # published before a kill; the record was settled at load
                return self._named(outcome, planned)
            move = PendingMove(
                key=planned.key,
                run_id=self.plan.run_id,
                branch=planned.branch,
                old=planned.previous_tip,
                new=outcome.commit,
                work_branch=work,
                history_ref=history_ref(planned.branch, self.plan.run_id),
            )
        elif outcome.status == "no_changes" and planned.previous_tip is not None and stable_tip is not None:
            # Batch Changes closes a changeset whose spec no longer produces a diff: the stable branch goes.
            move = PendingMove(
                key=planned.key,
                run_id=self.plan.run_id,
                branch=planned.branch,
                old=planned.previous_tip,
                new=None,
                work_branch=work,
                history_ref=None,
            )
        else:
            self._drop_work_branch(safe_git, outcome, work, base)
            store.update(lambda record: self._recorded(record, fresh, planned, outcome, base, published=False))
            return outcome

        def done(record: TaskRecordFile, moved: bool) -> None:
            self._recorded(record, fresh, planned, outcome, base, published=moved)

        if move_branch(store, safe_git, move, checked_out=checked_out(safe_git), done=done):
            replacing = f", replacing {move.old[:12]}" if move.old is not None else ""
            if move.new is None:
                self.log(f"task {outcome.index}: no changes needed any more: {planned.branch} deleted")
                return outcome
            self.log(f"task {outcome.index} published on {planned.branch} ({move.new[:12]}){replacing}")
            return self._named(outcome, planned)
        outcome.warnings.append(
            f"{planned.branch} was moved outside refactor-agent (or is checked out) during the night: it is left "
            f"alone, tonight's result stays on {outcome.branch}"
        )
        return outcome

    @staticmethod
    def _named(outcome: TaskSummary, planned: PlannedTask) -> TaskSummary:
        outcome.published = outcome.branch = planned.branch
        return outcome

    def _drop_work_branch(self, safe_git: SafeGit, outcome: TaskSummary, work: str | None, base: str) -> None:
        """A task that published nothing leaves no work branch: one without a commit goes, an unfinished commit
        is kept on a history ref."""
        if work is None:
            return
        tip = branch_tip(safe_git, work)
        if tip is None:
            return
        lines = ["start"]
        if tip != base and outcome.status in UNFINISHED:
            ref = history_ref(self.by_index[outcome.index][2].branch, self.plan.run_id, unfinished=True)
            lines.append(f"update {ref} {tip} {ZERO}")
            outcome.warnings.append(f"its unfinished commit is kept as {ref}")
        elif tip != base:
            return  # a commit of a failed task: kept where it is
        lines += [f"delete refs/heads/{work} {tip}", "prepare", "commit"]
        try:
            safe_git.run("update-ref", "--stdin", input=("\n".join(lines) + "\n").encode())
        except GitError:
            return
        outcome.branch = None

    def _recorded(
        self,
        record: TaskRecordFile,
        fresh: TaskRecord,
        planned: PlannedTask,
        outcome: TaskSummary,
        base: str,
        *,
        published: bool,
    ) -> None:
        task = record.tasks.get(planned.key) or fresh.model_copy(deep=True)
        record.tasks[planned.key] = task
        task.status, task.verdict, task.last_run = outcome.status, outcome.verdict, self.plan.run_id
        task.fingerprint = fresh.fingerprint
        tip = outcome.commit if published and outcome.status == "committed" else None
        if published:
            # Nights open: the night that made it counts, and each night it stays waiting (plan.py's keep).
            still_open = task.fate == "waiting" and tip is not None
            task.nights_open = task.nights_open + 1 if still_open else int(tip is not None)
            task.tip, task.base = tip, base
            task.fate = "waiting" if tip is not None else "no_changes"
            task.failing_nights = 0
        elif outcome.status == "no_changes":
            task.fate, task.base, task.failing_nights = "no_changes", base, 0
        elif outcome.status == "committed":
            task.fate = "outside"
        else:
            task.fate = "failing" if task.tip is None else task.fate
            task.failing_nights += 1
        task.outcomes = [
            *task.outcomes,
            NightOutcome(
                run_id=self.plan.run_id,
                action=planned.action,
                status=outcome.status,
                verdict=outcome.verdict,
                tip=tip,
                reason=outcome.reason or planned.reason,
            ),
        ][-self.night.retention.keep_history :]
