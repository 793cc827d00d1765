"""`run --executor ray`: each task is a Ray task on a node labelled with the custom resource `refactor-agent`.

Ray (an optional extra: `pip install refactor-agent[ray]`) does the scheduling; nothing here is a scheduler. No
shared filesystem is assumed: the head sends the base commit as a git bundle, the worker clones it into a scratch
directory, runs the task with the runner's own stages (environment, workspace, baseline, loop, gate, settle) on
its own Docker and its servers (the run's --server URLs, resolved on the worker), and sends back the task's branch
as a git bundle with its run records (transcript lines, summary, patch). The head fetches the branch into the
user's repository (hooks and fsmonitor off, only refs/heads/refactor-agent/<run-id>/...) and merges the records
into the run's one directory: one transcript, one summary.json, one report.

A node offers `refactor-agent: N` to take N tasks at once: `ray start --resources='{"refactor-agent": 1}'`.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent.dispatch.ray_worker import RESULT_REF, TaskRequest, TaskResult, run_remote_task
from agent.protocol.config import RunConfig
from agent.protocol.events import Response, parse_event
from agent.protocol.nights import PlannedTask
from agent.protocol.records import TaskSummary
from agent.run.interrupt import Interrupted
from agent.run.run import Run
from agent.worktree.safe_git import GitError, SafeGit
from agent.worktree.workspace import BRANCH_PREFIX, user_git

NODE_RESOURCE = "refactor-agent"  # the custom resource a node offers to say it has Docker, the image and a server
NODE_HINT = f"""start each worker with `ray start --address=HEAD:6379 --resources='{{"{NODE_RESOURCE}": 1}}'`"""


class RayDispatch:
    """The head's side: the bundle out, one Ray task per task, results back as they end."""

    def __init__(self, address: str | None) -> None:
        self.address = address

    def run_tasks(self, run: Run, tasks: list[tuple[int, RunConfig, str]]) -> Iterator[TaskSummary]:
        import ray  # the optional extra, loaded only for --executor ray

        owned = not ray.is_initialized()
        problem = _join(ray, self.address, connect=owned)
        if problem is not None:  # every task says why; nothing waits forever for a node that never comes
            if owned and ray.is_initialized():
                ray.shutdown()
            yield from (_failed(index, config, task, f"ray: {problem}") for index, config, task in tasks)
            return
        try:
            with tempfile.TemporaryDirectory(prefix="refactor-agent-ray-") as scratch:
                hooks = Path(scratch) / "no-hooks"
                hooks.mkdir()
                # Each repository of the night goes out once, as a bundle of its HEAD; a named night's also holds
                # the plan's base and the previous tips of its stale tasks (the worker refreshes them).
                bundles: dict[Path, tuple[SafeGit, str, Any]] = {}
                for _index, config, _task in tasks:
                    if config.repo not in bundles:
                        repo = run.repos[config.repo].repo
                        user = user_git(repo, hooks)
                        base = run.repos[config.repo].base or repo.head.commit.hexsha
                        tips = [
                            planned.previous_tip
                            for index, each, _task in tasks
                            if each.repo == config.repo
                            and (planned := _planned(run, index)) is not None
                            and planned.previous_tip is not None
                        ]
                        bundle = Path(scratch) / f"base-{len(bundles)}.bundle"
                        user.run("bundle", "create", "--quiet", str(bundle), "HEAD", base, *tips)
                        bundles[config.repo] = (user, base, ray.put(bundle.read_bytes()))
                remote = ray.remote(resources={NODE_RESOURCE: 1}, num_cpus=0, max_retries=0)(run_remote_task)
                pending = {
                    remote.remote(
                        bundles[config.repo][2],
                        TaskRequest(
                            config=config.model_dump(mode="json"),
                            run_id=run.journal.run_id,
                            base_commit=bundles[config.repo][1],
                            index=index,
                            task=task,
                            deadline_at=run.night.deadline_at,
                            min_task_time_s=run.night.min_task_time_s,
                            planned=_planned(run, index),
                        ),
                    ): (index, config, task)
                    for index, config, task in tasks
                }
                try:
                    while pending:
                        (done,), _ = ray.wait(list(pending), num_returns=1)
                        index, config, task = pending.pop(done)
                        try:
                            result = TaskResult.model_validate(ray.get(done))
                        except Exception as error:  # the node failed the task (no Docker, a crash): recorded
                            yield _failed(index, config, task, f"ray: {_last_line(error)}")
                            continue
                        yield self._bring_back(run, config, bundles[config.repo][0], Path(scratch), result)
                except Interrupted:
                    for ref in pending:
                        with contextlib.suppress(Exception):
                            ray.cancel(ref, force=True)
                    raise
        finally:
            if owned:
                ray.shutdown()

    def _bring_back(self, run: Run, config: RunConfig, user: SafeGit, scratch: Path, result: TaskResult) -> TaskSummary:
        """The worker's records into the run's journal, its branch into the user's repository."""
        outcome = result.outcome
        if run.repos[config.repo].environment is None and result.environment is not None:
            run.record_environment(config, result.environment)
        for line in result.transcript:
            event = parse_event(line)
            if event.task != outcome.index:
                continue
            if isinstance(event, Response):
                run.requests.append(event.stats)
            run.emit(event)
        run.journal.append_patch_records(result.patch)
        if result.bundle is not None and outcome.commit is not None:
            try:
                if outcome.branch is None:
                    _fetch_commit(user, scratch, result.bundle, outcome)
                else:
                    _fetch_branch(user, scratch, result.bundle, outcome, run.journal.run_id)
            except GitError as error:
                outcome.status = outcome.verdict = "failed"
                outcome.reason = f"{outcome.reason}; the branch could not be brought back: {error}"
        return outcome


def _planned(run: Run, index: int) -> PlannedTask | None:
    return run.tonight.planned(index) if run.tonight is not None else None


def _join(ray: Any, address: str | None, *, connect: bool) -> str | None:
    """Join the cluster (unless this process already has); why its tasks cannot run, or None."""
    try:
        if connect:
            ray.init(address=address, logging_level="WARNING")
        nodes = ray.nodes()
    except Exception as error:  # a bad --address, a cluster that is gone
        return f"cannot join the cluster: {_last_line(error)}"
    if not any(node["Resources"].get(NODE_RESOURCE, 0) for node in nodes if node["Alive"]):
        return f"no node of the cluster offers the resource {NODE_RESOURCE!r}: {NODE_HINT}"
    return None


def _fetch_branch(user: SafeGit, scratch: Path, bundle: bytes, outcome: TaskSummary, run_id: str) -> None:
    """Only the task's own new branch, refs/heads/refactor-agent/<run-id>/..., pointing at the commit reported."""
    branch = outcome.branch or ""
    if not branch.startswith(f"{BRANCH_PREFIX}{run_id}/"):
        raise GitError(f"the worker named the branch {branch!r}, not one of this run")
    ref = f"refs/heads/{branch}"
    user.run("check-ref-format", ref)
    path = scratch / f"task-{outcome.index}.bundle"
    path.write_bytes(bundle)
    # No "+": an existing branch of that name is never moved.
    user.run("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", str(path), f"{ref}:{ref}")
    fetched = user.run("rev-parse", "--verify", f"{ref}^{{commit}}").decode().strip()
    if fetched != outcome.commit:
        raise GitError(f"{branch} is at {fetched}, the worker reported {outcome.commit}")


def _fetch_commit(user: SafeGit, scratch: Path, bundle: bytes, outcome: TaskSummary) -> None:
    """A refreshed night task's commit into the object store, no ref written (the publish points the task's branch
    at it)."""
    path = scratch / f"task-{outcome.index}.bundle"
    path.write_bytes(bundle)
    user.run("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", str(path), RESULT_REF)
    user.run("cat-file", "-e", f"{outcome.commit}^{{commit}}")


def _failed(index: int, config: RunConfig, task: str, reason: str) -> TaskSummary:
    return TaskSummary(index=index, task=task, repo=str(config.repo), status="failed", verdict="failed", reason=reason)


def _last_line(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[-1].strip() if lines else error.__class__.__name__
