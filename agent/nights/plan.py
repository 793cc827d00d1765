"""The planning pass of a named night: per repository its default branch and task record, per task the facts git
gives (its branch's tip, the merged checks, the conflicts with the new base) and the decision (agent/nights/
decide.py); the night narrowed to the tasks that run; the plan's text (`night --plan` prints it and exits)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import git

from agent.nights.decide import Merge, TaskFacts, decide
from agent.nights.default_branch import DefaultBranch, default_branch
from agent.nights.errors import NightError
from agent.nights.history import history_tips
from agent.nights.identity import allocate_branch, fingerprint, repository_key, task_key, wanted_branch
from agent.nights.kinds import kind_of
from agent.nights.merged import conflicts, find_merge
from agent.nights.predicates import unmatched
from agent.nights.publish import branch_tip, checked_out
from agent.nights.record import RecordStore
from agent.protocol.config import NightConfig, RunConfig, TaskSpec
from agent.protocol.nights import (
    Fate,
    NightOutcome,
    NightPlan,
    PlannedTask,
    RepoPlan,
    TaskKey,
    TaskRecord,
    TaskRecordFile,
)
from agent.record.report import base_since
from agent.safety.printable import printable
from agent.worktree.safe_git import GitError, SafeGit
from agent.worktree.workspace import BRANCH_PREFIX, user_git

PLAN_RECORD = "plan.json"
# The footer's words, in its order (NIGHTS_PLAN §3.6).
FOOTER = (
    ("run", "to run with the model"),
    ("rebase", "to rebase"),
    ("keep", "kept"),
    ("retire", "retired"),
    ("skip", "skipped"),
    ("wait", "waiting"),
    ("archive", "archived"),
    ("leave", "left alone"),
)
RUNS = ("run", "rebase")
# The fate a decision gives a task by itself (the others keep theirs, or get one when the task is published).
FATES: dict[str, Fate] = {"retire": "merged", "archive": "archived", "leave": "outside", "wait": "queued"}


@dataclass(frozen=True)
class PlanOptions:
    """`night --plan` (print the decisions and stop), `--only failed`, `--retry discarded`."""

    plan_only: bool = False
    only_failed: bool = False
    retry_discarded: bool = False


@dataclass(frozen=True)
class Planned:
    """What the planning pass gives the command: the plan, the night narrowed to its tasks that run (None: none
    does), and each repository's record store."""

    plan: NightPlan
    night: NightConfig | None
    stores: dict[str, RecordStore]  # by repository path
    fresh: dict[TaskKey, TaskRecord]  # every task of the night file as a new record would hold it


def record_store(
    runs_dir: Path,
    repo: git.Repo,
    safe_git: SafeGit,
    night: str,
    known: dict[TaskKey, TaskRecord],
    run_id: str,
    log: Callable[[str], None],
) -> RecordStore:
    key = repository_key(Path(str(repo.working_tree_dir)), Path(repo.common_dir))
    return RecordStore(runs_dir, key, safe_git, night=night, known=known, written_by=run_id, log=log)


def fresh_record(night: str, config: RunConfig, spec: TaskSpec, branch: str, run_id: str) -> TaskRecord:
    """A task as a new record holds it, before anything became of it."""
    return TaskRecord(
        key=task_key(night, spec),
        text=spec.text,
        kind=kind_of(spec),
        branch=branch,
        fingerprint=fingerprint(config, spec),
        fate="queued",
        first_run=run_id,
        last_run=run_id,
    )


def _night_branches(safe_git: SafeGit, night: str) -> set[str]:
    listing = safe_git.run("for-each-ref", "--format=%(refname:strip=2)", f"refs/heads/{BRANCH_PREFIX}{night}/")
    return set(listing.decode("utf-8", errors="replace").split())


def _facts(
    safe_git: SafeGit,
    key: TaskKey,
    spec: TaskSpec | None,
    record: TaskRecord | None,
    fresh: TaskRecord,
    default: DefaultBranch,
    checked_out: dict[str, str],
    log: Callable[[str], None],
) -> TaskFacts:
    branch = record.branch if record is not None else fresh.branch
    tip = branch_tip(safe_git, branch)
    merged: Merge | None = None
    found_conflicts: list[str] | None = None
    if record is not None and record.tip is not None:
        published = [each for each in [tip, record.tip, *history_tips(safe_git, branch)] if each is not None]
        try:  # a check git cannot answer in time finds nothing: the task is then treated as not merged
            merged = find_merge(safe_git, key, published, default)
            if merged is None and default.commit != record.base and tip == record.tip:
                found_conflicts = conflicts(safe_git, record.tip, default.commit)
        except GitError as error:
            log(f"warning: {branch}: {error}: taken as not merged")
    return TaskFacts(
        spec=spec,
        record=record,
        fingerprint=fresh.fingerprint,
        tip=tip,
        checked_out=checked_out.get(branch),
        default=default,
        merged=merged,
        conflicts=found_conflicts,
    )


def _repo_plan(
    night: NightConfig,
    path: Path,
    entries: list[tuple[RunConfig, TaskSpec]],
    repo: git.Repo,
    safe_git: SafeGit,
    run_id: str,
    options: dict[str, bool],
    log: Callable[[str], None],
) -> tuple[RepoPlan, RecordStore, list[tuple[RunConfig, TaskSpec]], dict[TaskKey, TaskRecord]]:
    name = str(night.name)
    default = default_branch(safe_git)
    wanted = {task_key(name, spec): (config, spec) for config, spec in entries}
    known = {
        key: fresh_record(name, config, spec, wanted_branch(name, spec.text), run_id)
        for key, (config, spec) in wanted.items()
    }
    store = record_store(night.runs_dir, repo, safe_git, name, known, run_id, log)
    record = store.load()
    # A name another task has (any fate), or a branch of ours without a record (not ours: left alone).
    taken = {task.branch for task in record.tasks.values()}
    taken |= _night_branches(safe_git, name) - taken
    checked_out_now = checked_out(safe_git)
    select = entries[0][0].select  # a [[repo]]'s: the same for each of its tasks
    skipped = unmatched(safe_git, default.commit, default.name, select) if select is not None else None
    planned, runs = [], []
    for key, (config, spec) in wanted.items():
        earlier = record.tasks.get(key)
        fresh = known[key]
        if earlier is None:
            fresh.branch = allocate_branch(key, fresh.branch, taken)
            taken.add(fresh.branch)
        facts = (
            None if skipped is not None else _facts(safe_git, key, spec, earlier, fresh, default, checked_out_now, log)
        )
        action, reason = ("skip", f"repository skipped: {skipped}") if facts is None else decide(facts, **options)
        index = len(runs) + 1 if action in RUNS else None
        if index is not None:
            runs.append((config, spec))
        planned.append(
            PlannedTask(
                key=key,
                branch=earlier.branch if earlier is not None else fresh.branch,
                text=spec.text,
                action=action,
                reason=reason,
                index=index,
                previous_tip=facts.tip if facts is not None else None,
                conflicts=facts.conflicts or [] if facts is not None else [],
                merged_by=facts.merged.by
                if facts is not None and facts.merged is not None and action == "retire"
                else None,
            )
        )
    for key, earlier in record.tasks.items():
        if key not in wanted and earlier.fate != "archived" and key.startswith(f"{name}/"):
            planned.append(
                PlannedTask(
                    key=key,
                    branch=earlier.branch,
                    text=earlier.text,
                    action="archive",
                    reason="no longer in the night file: branch kept, never updated",
                )
            )
    # Last night's base: that of the task the latest run touched (run ids sort by their time).
    previous = [task.base for task in sorted(record.tasks.values(), key=lambda task: task.last_run) if task.base]
    plan = RepoPlan(
        repo=str(path),
        record_key=store.path.stem,
        default_branch=default.name,
        default_source=default.source,
        base=default.commit,
        previous_base=previous[-1] if previous else None,
        skipped=skipped,
        tasks=planned,
    )
    return plan, store, runs, known


def refuse_what_is_not_built(night: NightConfig) -> None:
    """Shards are read from the night file but not acted on yet: refused in one line rather than silently
    ignored."""
    for number, ((config, _task), spec) in enumerate(zip(night.tasks(), night.specs, strict=True), start=1):
        given = "shard_by" if spec.shard is not None else "max_open" if spec.max_open is not None else None
        if given is not None:
            raise NightError(
                f"task {number} ({config.repo}): {given} is not supported yet: remove it from the night file"
            )


def plan_night(
    night: NightConfig,
    repos: dict[Path, git.Repo],
    run_id: str,
    *,
    hooks_dir: Path,
    options: PlanOptions,
    log: Callable[[str], None],
) -> Planned:
    """Reads git and the records only: nothing is written (`--plan` runs it while a night runs). `hooks_dir`: an
    empty directory of ours for git's hooks (none of anyone's runs)."""
    choices = {"only_failed": options.only_failed, "retry_discarded": options.retry_discarded}
    by_repo: dict[Path, list[tuple[RunConfig, TaskSpec]]] = {}
    for (config, _task), spec in zip(night.tasks(), night.specs, strict=True):
        by_repo.setdefault(config.repo, []).append((config, spec))
    plans, stores, runs, fresh = [], {}, [], {}
    for path, entries in by_repo.items():
        safe_git = user_git(repos[path], hooks_dir)
        plan, store, repo_runs, known = _repo_plan(night, path, entries, repos[path], safe_git, run_id, choices, log)
        plans.append(plan)
        fresh.update(known)
        stores[str(path)] = store
        offset = len(runs)
        for task in plan.tasks:
            if task.index is not None:
                task.index += offset
        runs += repo_runs
    night_plan = NightPlan(
        night=str(night.name),
        run_id=run_id,
        only_failed=options.only_failed,
        retry_discarded=options.retry_discarded,
        repos=plans,
    )
    narrowed = None
    if runs:
        narrowed = night.model_copy(
            update={
                "repos": [config.model_copy(update={"tasks": [spec.text]}) for config, spec in runs],
                "specs": [spec for _, spec in runs],
            }
        )
    return Planned(night_plan, narrowed, stores, fresh)


def plan_lines(plan: NightPlan, *, planning_only: bool) -> list[str]:
    lines = []
    counts = dict.fromkeys((action for action, _ in FOOTER), 0)
    for repo in plan.repos:
        source = "origin's HEAD as last fetched" if repo.default_source == "remote HEAD" else "the checked-out branch"
        since = base_since(repo.base, repo.previous_base)
        if repo.skipped is not None:
            lines.append(printable(f"{repo.repo}: skipped: {repo.skipped}"))
        else:
            lines.append(printable(f"{repo.repo}: {repo.default_branch} at {repo.base[:12]} ({source}; {since})"))
        width = max((len(task.branch) for task in repo.tasks), default=0) + 2
        for task in repo.tasks:
            counts[task.action] += 1
            lines.append(printable(f"  {task.action:<8}{task.branch:<{width}}{task.reason}"))
    said = ", ".join(f"{counts[action]} {words}" for action, words in FOOTER if counts[action])
    footer = f"night {plan.night}: {said or 'no tasks'}"
    if planning_only:
        footer += "; --plan: nothing ran, nothing was fetched"
    lines.append(printable(footer))
    return lines


def commit_plan(planned: Planned) -> None:
    """The decisions that need no run, into each repository's record: retired, archived, left alone, kept,
    skipped; each planned task's outcome of tonight (a task that runs gets its result when it is published)."""
    plan = planned.plan
    for repo in plan.repos:

        def change(record: TaskRecordFile, repo: RepoPlan = repo) -> None:
            for task in repo.tasks:
                known = record.tasks.get(task.key)
                if known is None and task.action not in RUNS:
                    fresh = planned.fresh.get(task.key)
                    if fresh is None:
                        continue
                    known = record.tasks[task.key] = fresh.model_copy(update={"branch": task.branch})
                if known is None:
                    continue
                fate = FATES.get(task.action)
                if fate is not None:
                    known.fate = fate
                if task.action == "skip" and repo.skipped is None and task.previous_tip is None and known.tip:
                    known.fate = "discarded"  # its branch was deleted (decide.py's discarded row)
                if task.merged_by is not None:
                    known.merged_by = task.merged_by
                if known.fate == "waiting" and task.action == "keep":  # a rebase counts when it is published
                    known.nights_open += 1
                if task.action not in RUNS:
                    known.outcomes.append(NightOutcome(run_id=plan.run_id, action=task.action, reason=task.reason))
                    known.last_run = plan.run_id

        planned.stores[repo.repo].update(change)
