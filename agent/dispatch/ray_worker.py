"""`run --executor ray`, a worker node's side: the task in a scratch clone of the head's bundle, through the run's own
pipeline (composed here as the command composes it, with this node's Docker, servers and slot), and what goes back
to the head: the outcome, the task's transcript lines and patch, its branch (or, a refreshed night task, its commit)
as a bundle."""

from __future__ import annotations

import json
import subprocess
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import git
from pydantic import BaseModel

from agent.dispatch.local import local_dispatch
from agent.nights.tonight import NightTasks
from agent.protocol.config import NightConfig, RunConfig
from agent.protocol.nights import PlannedTask
from agent.protocol.records import EnvironmentRecord, TaskSummary
from agent.record.journal import RunJournal
from agent.run.compose import build_run
from agent.run.sandboxes import DockerSandboxes
from agent.server.slot_lock import claim_slot, server_slots
from agent.worktree.safe_git import SafeGit
from sandbox.daemon import docker_client

# Where the worker's clone keeps a commit without a branch for its bundle back to the head.
RESULT_REF = "refs/refactor-agent/result"


class TaskRequest(BaseModel):
    """What a worker needs besides the bundle: the run's settings, its id (branch names and trailers), the base,
    and the night's end: the task's own --task-timeout is in its settings, the night's deadline is not."""

    config: dict[str, Any]
    run_id: str
    base_commit: str
    index: int
    task: str
    # An absolute wall-clock time: a worker whose clock is off by a minute ends its task a minute off.
    deadline_at: datetime | None
    min_task_time_s: float
    # A named night's task: its plan entry (its trailer; a stale one is refreshed here without the model, from its
    # previous tip, which the bundle holds), and base_commit is the plan's base.
    planned: PlannedTask | None = None


class TaskResult(BaseModel):
    outcome: TaskSummary
    environment: EnvironmentRecord | None = None
    transcript: list[str] = []  # the task's transcript lines, as the worker's journal wrote them
    patch: bytes = b""  # the task's entry of patch.diff
    bundle: bytes | None = None  # the task's branch, when it has a commit


def run_remote_task(bundle: bytes, request: TaskRequest) -> dict[str, Any]:
    """On a worker node: the task in a scratch clone of the bundle, with the runner's own code; a TaskResult."""
    with tempfile.TemporaryDirectory(prefix="refactor-agent-ray-task-") as directory:
        scratch = Path(directory)
        (scratch / "base.bundle").write_bytes(bundle)
        clone = scratch / "repo"
        hooks = scratch / "no-hooks"
        hooks.mkdir()
        # --no-checkout: no hook of the template runs; the checkout below goes through SafeGit.
        subprocess.run(
            ["git", "clone", "--quiet", "--no-checkout", str(scratch / "base.bundle"), str(clone)],
            check=True,
            capture_output=True,
        )
        clone_git = SafeGit(clone / ".git", clone, hooks)
        clone_git.run("checkout", "--quiet", "--detach", request.base_commit)
        # The task's settings keep the head's repository path: it names the repository in the records (branch,
        # summary, events) as on the head, while the work happens in the clone it maps to.
        config = RunConfig.model_validate({**request.config, "runs_dir": str(scratch / "runs")})
        journal = RunJournal(config.runs_dir, request.run_id)
        # The night's deadline holds here as on the head: a task that cannot start in time is skipped, one in flight
        # is stopped at it (in whatever thread Ray runs it: agent/run/time_limit.py).
        night = NightConfig(
            repos=[config],
            runs_dir=config.runs_dir,
            deadline_at=request.deadline_at,
            min_task_time_s=request.min_task_time_s,
        )
        # The node's other tasks run in processes of their own: each takes a slot of the server to itself.
        with claim_slot(config.llm.server_url, server_slots(config.llm.server_url)) as slot:
            planned = request.planned
            run = build_run(
                night,
                repos={config.repo: git.Repo(clone)},
                sandboxes=DockerSandboxes(docker_client()),
                server_url=config.llm.server_url,
                journal=journal,
                observe=lambda _event: None,
                dispatch=local_dispatch(night),
                slot=slot,
                tonight=NightTasks({request.index: (str(config.repo), request.base_commit, planned)})
                if planned is not None
                else None,
            )
            try:  # through the run's own dispatch: several --server make a fleet of the node's servers here too
                outcome = next(iter(run.dispatch.run_tasks(run, [(request.index, config, request.task)])))
            finally:
                run.remove_scratch()
                journal.close()
        transcript = [
            line
            for line in (journal.directory / "transcript.jsonl").read_text(encoding="utf-8").splitlines()
            if json.loads(line).get("task") == request.index
        ]
        patch_file = journal.directory / "patch.diff"
        branch_bundle = None
        if outcome.commit is not None:
            # A refreshed night task's commit has no branch (the head publishes it): a ref of the clone carries it.
            ref = f"refs/heads/{outcome.branch}" if outcome.branch is not None else RESULT_REF
            if outcome.branch is None:
                clone_git.run("update-ref", RESULT_REF, outcome.commit)
            out = scratch / "branch.bundle"
            clone_git.run("bundle", "create", "--quiet", str(out), ref)
            branch_bundle = out.read_bytes()
        return TaskResult(
            outcome=outcome,
            environment=run.repos[config.repo].environment,
            transcript=transcript,
            patch=patch_file.read_bytes() if patch_file.exists() else b"",
            bundle=branch_bundle,
        ).model_dump()
