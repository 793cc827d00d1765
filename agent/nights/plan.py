"""The planning pass of a named night: per repository its default branch and task record, per task the facts git
gives (its branch's tip, the merged checks, the conflicts with the new base) and the decision (agent/nights/
decide.py); the night narrowed to the tasks that run; the plan's text (`night --plan` prints it and exits)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import git

from agent.nights.decide import Merge, TaskFacts, decide, wait_for_places
from agent.nights.default_branch import DefaultBranch, default_branch
from agent.nights.history import HistoryTips
from agent.nights.identity import (
    allocate_branch,
    fingerprint,
    repository_key,
    sharded_task,
    task_key,
    wanted_branch,
)
from agent.nights.kinds import kind_of
from agent.nights.merged import conflicts, find_merge
from agent.nights.predicates import unmatched
from agent.nights.publish import checked_out
from agent.nights.record import RecordStore
from agent.nights.shards import ShardError, compute_shards, no_shards_reason
from agent.protocol.config import NightConfig, RunConfig, TaskSpec
from agent.protocol.nights import (
    Action,
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


def record_key(repo: git.Repo) -> str:
    """The name of a repository's task record (its work tree and git directory, agent/nights/identity.py)."""
    return repository_key(Path(str(repo.working_tree_dir)), Path(repo.common_dir))


def record_store(
    runs_dir: Path,
    repo: git.Repo,
    safe_git: SafeGit,
    night: str,
    known: dict[TaskKey, TaskRecord],
    run_id: str,
    log: Callable[[str], None],
    *,
    read_only: bool = False,
) -> RecordStore:
    return RecordStore(
        runs_dir, record_key(repo), safe_git, night=night, known=known, written_by=run_id, log=log, read_only=read_only
    )


def fresh_record(night: str, config: RunConfig, spec: TaskSpec, branch: str, run_id: str) -> TaskRecord:
    """A task as a new record holds it, before anything became of it."""
    return TaskRecord(
        key=task_key(night, spec),
        text=spec.text,
        kind=kind_of(spec),
        shard=spec.part.label if spec.part is not None else None,
        branch=branch,
        fingerprint=fingerprint(config, spec),
        fate="queued",
        first_run=run_id,
        last_run=run_id,
    )


def _branch_tips(safe_git: SafeGit) -> tuple[dict[str, str], dict[str, str]]:
    """Every branch and the commit it points at, from one listing: what the plan's decisions read of each task's;
    and the branches (full names) whose object is a commit, which the default branch's commit is read from."""
    listing = safe_git.run("for-each-ref", "--format=%(objectname) %(objecttype) %(refname)", "refs/heads/")
    rows = [line.split(" ", 2) for line in listing.decode("utf-8", errors="replace").splitlines()]
    tips = {ref.removeprefix("refs/heads/"): tip for tip, _kind, ref in rows}
    # A name that is not UTF-8 could read as another's: git is asked for those.
    return tips, {ref: tip for tip, kind, ref in rows if kind == "commit" and "\ufffd" not in ref}


def _facts(
    safe_git: SafeGit,
    key: TaskKey,
    spec: TaskSpec | None,
    record: TaskRecord | None,
    fresh: TaskRecord,
    default: DefaultBranch,
    branches: tuple[dict[str, str], dict[str, str], HistoryTips],
    log: Callable[[str], None],
) -> TaskFacts:
    """`branches`: each branch's tip (_branch_tips), the worktree each checked-out one is in (checked_out), and the
    commits each was published at."""
    tips, checked_out_in, history = branches
    branch = record.branch if record is not None else fresh.branch
    tip = tips.get(branch)
    merged: Merge | None = None
    found_conflicts: list[str] | None = None
    if record is not None and record.tip is not None:
        published = [each for each in [tip, record.tip, *history.of(branch)] if each is not None]
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
        checked_out=checked_out_in.get(branch),
        default=default,
        merged=merged,
        conflicts=found_conflicts,
    )


@dataclass(frozen=True)
class _Sharded:
    """A sharded task tonight (by its own key; its shards are tasks of their own)."""

    spec: TaskSpec
    read: bool  # its shards were computed (not when the repository is skipped, or git could not say)
    why: str | None  # why it has no shard tonight


Decided = tuple[TaskKey, TaskSpec | None, TaskRecord, TaskFacts | None, Action, str]


def _wanted(
    name: str,
    entries: list[tuple[RunConfig, TaskSpec]],
    safe_git: SafeGit,
    default: DefaultBranch,
    skipped: str | None,
) -> tuple[dict[TaskKey, tuple[RunConfig, TaskSpec]], dict[TaskKey, _Sharded]]:
    """Tonight's tasks by key (each shard of a sharded task its own), and the sharded tasks."""
    wanted: dict[TaskKey, tuple[RunConfig, TaskSpec]] = {}
    sharded: dict[TaskKey, _Sharded] = {}
    for config, spec in entries:
        if spec.shard is None:
            wanted[task_key(name, spec)] = (config, spec)
            continue
        try:
            parts = compute_shards(safe_git, default.commit, spec.shard) if skipped is None else []
            why = f"repository skipped: {skipped}" if skipped is not None else None
        except ShardError as error:
            parts, why = [], f"its shards could not be read at {default.name} ({default.commit[:12]}): {error}"
        read = skipped is None and why is None
        sharded[task_key(name, spec)] = _Sharded(spec, read, why or (None if parts else no_shards_reason(spec.shard)))
        for part in parts:
            shard = spec.model_copy(update={"part": part})
            wanted[task_key(name, shard)] = (config, shard)
    return wanted, sharded


def _capped(decided: list[Decided], sharded: dict[TaskKey, _Sharded]) -> list[Decided]:
    """A sharded task's `max_open` applied to its shards' decisions (agent/nights/decide.py: wait_for_places)."""
    groups: dict[TaskKey, list[int]] = {}
    for number, (key, *_rest) in enumerate(decided):
        of = sharded.get(sharded_task(key))
        if of is not None and of.spec.max_open is not None and key != sharded_task(key):
            groups.setdefault(sharded_task(key), []).append(number)
    capped = list(decided)
    for base, numbers in groups.items():
        max_open = sharded[base].spec.max_open
        assert max_open is not None
        shards = [(decided[number][4], decided[number][5], decided[number][2].fate) for number in numbers]
        for number, (action, reason) in zip(numbers, wait_for_places(shards, max_open), strict=True):
            capped[number] = (*decided[number][:4], action, reason)
    return capped


def _repo_plan(
    night: NightConfig,
    path: Path,
    entries: list[tuple[RunConfig, TaskSpec]],
    repo: git.Repo,
    safe_git: SafeGit,
    run_id: str,
    options: dict[str, bool],
    log: Callable[[str], None],
    *,
    plan_only: bool,
) -> tuple[RepoPlan, RecordStore, list[tuple[RunConfig, TaskSpec]], dict[TaskKey, TaskRecord]]:
    name = str(night.name)
    tips, commits = _branch_tips(safe_git)
    default = default_branch(safe_git, commits)
    select = entries[0][0].select  # a [[repo]]'s: the same for each of its tasks
    skipped = unmatched(safe_git, default.commit, default.name, select) if select is not None else None
    wanted, sharded = _wanted(name, entries, safe_git, default, skipped)
    known = {
        key: fresh_record(name, config, spec, wanted_branch(name, spec), run_id)
        for key, (config, spec) in wanted.items()
    }
    store = record_store(night.runs_dir, repo, safe_git, name, known, run_id, log, read_only=plan_only)
    record = store.load(tips)
    # A name another task has (any fate), or a branch of ours without a record (not ours: left alone).
    taken = {task.branch for task in record.tasks.values()}
    taken |= {branch for branch in tips if branch.startswith(f"{BRANCH_PREFIX}{name}/")} - taken
    branches = tips, checked_out(safe_git), HistoryTips(safe_git)
    decided: list[Decided] = []
    for key, (_config, spec) in wanted.items():
        earlier = record.tasks.get(key)
        fresh = known[key]
        if earlier is None:
            fresh.branch = allocate_branch(key, fresh.branch, taken)
            taken.add(fresh.branch)
        facts = None if skipped is not None else _facts(safe_git, key, spec, earlier, fresh, default, branches, log)
        action, reason = ("skip", f"repository skipped: {skipped}") if facts is None else decide(facts, **options)
        decided.append((key, spec, earlier or fresh, facts, action, reason))
    for key, earlier in record.tasks.items():
        if key in wanted or earlier.fate == "archived" or not key.startswith(f"{name}/"):
            continue
        of = sharded.get(sharded_task(key))
        if of is not None and not of.read:
            decided.append((key, None, earlier, None, "skip", str(of.why)))  # kept until its shards can be read
        elif of is not None:  # a shard its task no longer has: retired if merged, else archived
            facts = _facts(safe_git, key, None, earlier, earlier, default, branches, log)
            action, reason = decide(facts, **options)
            if action == "archive":
                reason = f"no longer one of its task's shards at {default.name}: branch kept, never updated"
            decided.append((key, None, earlier, facts, action, reason))
        else:
            reason = "no longer in the night file: branch kept, never updated"
            decided.append((key, None, earlier, None, "archive", reason))
    decided = _capped(decided, sharded)
    planned, runs = [], []
    for key, spec, task, facts, action, reason in decided:
        index = len(runs) + 1 if action in RUNS else None
        if index is not None and spec is not None:
            runs.append((wanted[key][0], spec))
        planned.append(
            PlannedTask(
                key=key,
                branch=task.branch,
                text=spec.prompt() if spec is not None else task.text,
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
    for key, of in sharded.items():  # one line for a task with no shard tonight
        if of.why is not None and not any(sharded_task(task.key) == key for task in planned):
            branch = wanted_branch(name, of.spec)
            planned.append(PlannedTask(key=key, branch=branch, text=of.spec.text, action="skip", reason=of.why))
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
        plan, store, repo_runs, known = _repo_plan(
            night, path, entries, repos[path], safe_git, run_id, choices, log, plan_only=options.plan_only
        )
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
                "repos": [
                    config.model_copy(update={"tasks": [spec.prompt()], "shard": spec.part}) for config, spec in runs
                ],
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
