"""A new night of a night file (not its `resume`) takes over an earlier run of it that did not finish (killed, a
reboot): that run's work branches go, their unfinished commits kept as history refs (`…/<run-id>-unfinished`),
its resume snapshots too, and the run is marked superseded so that it is never resumed: one branch per task."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import git

from agent.nights.history import history_ref
from agent.nights.plan import PLAN_RECORD
from agent.nights.publish import ZERO, branch_tip
from agent.protocol.nights import NightPlan
from agent.protocol.records import RunSummary
from agent.record.atomic import write_atomically
from agent.record.journal import run_directories
from agent.record.progress import RESUMABLE
from agent.worktree.safe_git import GitError
from agent.worktree.workspace import BRANCH_PREFIX, WIP_REF_PREFIX, task_slug, user_git


def _unfinished(run_dir: Path, night: str) -> tuple[NightPlan, RunSummary] | None:
    try:
        plan = NightPlan.model_validate_json((run_dir / PLAN_RECORD).read_bytes())
        summary = RunSummary.model_validate_json((run_dir / "summary.json").read_bytes())
    except (OSError, ValueError):
        return None
    if plan.night != night or summary.status not in RESUMABLE or summary.superseded_by is not None:
        return None
    return plan, summary


def supersede(
    runs_dir: Path, night: str, run_id: str, repos: dict[Path, git.Repo], hooks_dir: Path, log: Callable[[str], None]
) -> None:
    for run_dir in run_directories(runs_dir):
        found = _unfinished(run_dir, night) if run_dir.name != run_id else None
        if found is None:
            continue
        plan, summary = found
        published = {task.index for task in summary.tasks if task.published is not None}
        for repo_plan in plan.repos:
            repo = repos.get(Path(repo_plan.repo))
            if repo is None:
                continue
            safe_git = user_git(repo, hooks_dir)
            lines = ["start"]
            for task in repo_plan.tasks:
                if task.index is None or task.index in published:
                    continue
                work = f"{BRANCH_PREFIX}{plan.run_id}/{task_slug(f'{task.index}-{task.text}')}"
                tip = branch_tip(safe_git, work)
                if tip is None:
                    continue
                if tip != repo_plan.base:
                    lines.append(f"update {history_ref(task.branch, plan.run_id, unfinished=True)} {tip} {ZERO}")
                lines.append(f"delete refs/heads/{work} {tip}")
            wip = safe_git.run("for-each-ref", "--format=%(refname) %(objectname)", f"{WIP_REF_PREFIX}{plan.run_id}/")
            lines += [f"delete {line.decode()}" for line in wip.splitlines() if line]
            try:
                safe_git.run("update-ref", "--stdin", input=("\n".join([*lines, "prepare", "commit"]) + "\n").encode())
            except GitError as error:
                log(f"warning: run {plan.run_id}'s work branches were not removed: {error}")
        summary.superseded_by = run_id
        write_atomically(run_dir / "summary.json", summary.model_dump_json(indent=2).encode())
        log(
            f"run {plan.run_id} of night {night} did not finish: superseded by this night (its tasks are planned "
            "again; its unfinished commits are kept under refs/refactor-agent/history/)"
        )
