"""`--executor ray` on a local two-node Ray cluster (a head, and a worker offering the `refactor-agent` resource)
gives the same branches (same trees) and the same report rows as the local executor for the same tasks.

Everything runs in a child process inside a loopback-only network namespace (Ray advertises and probes the
machine's network address otherwise; see docs): the cluster, the scripted server, both runs. Docker keeps working
there (its daemon is reached over its unix socket).
"""

from __future__ import annotations

import ctypes
import json
import multiprocessing
import os
import signal
import subprocess
import traceback
from pathlib import Path
from typing import Any

import git
import pytest

from agent.config import LLMConfig, NightConfig, RunConfig
from agent.journal import RunJournal
from agent.ray_executor import NODE_HINT
from agent.report import RunSummary
from agent.session import build_run
from sandbox import docker_client

from repos import SAMPLE_FILES, make_repo
from scripted_server import Reply, ScriptedServer

pytestmark = [pytest.mark.ray, pytest.mark.docker]

TASKS = {"alpha": "Add the alpha module", "beta": "Document compute_area"}
RUN_ID = "20261201-000000-abcd"
CLONE_NEWNET = 0x40000000  # <sched.h>
NO_NODE = f"no node of the cluster offers the resource 'refactor-agent': {NODE_HINT}"
# What measures the machine rather than the work: wall time, latencies, and the commit id (its date).
VOLATILE = {"wall_time_s", "metrics", "commit"}


def scripts() -> dict[str, list[Reply]]:
    document = (
        "str_replace",
        {"path": "pkg/geometry.py", "old": '"""Area of a rectangle."""', "new": '"""Area of a rectangle: w*h."""'},
    )
    return {
        TASKS["alpha"]: [
            Reply(tool_calls=[("create_file", {"path": "pkg/alpha.py", "content": "NAME = 'alpha'\n"})]),
            Reply(tool_calls=[("finish", {"summary": "Add pkg/alpha.py"})]),
        ],
        TASKS["beta"]: [Reply(tool_calls=[document]), Reply(tool_calls=[("finish", {"summary": "Document it"})])],
    }


def one_run(repo: Path, runs_dir: Path, server_url: str, executor: str, address: str) -> RunSummary:
    llm = LLMConfig(server_url=server_url, server_explicit=True, max_retries=1, retry_backoff_s=0.2)
    config = RunConfig(
        repo=repo,
        tasks=list(TASKS.values()),
        runs_dir=runs_dir,
        max_turns=10,
        llm=llm,
    )
    night = NightConfig(
        repos=[config], runs_dir=runs_dir, executor=executor, ray_address=address if executor == "ray" else None
    )
    journal = RunJournal(runs_dir, RUN_ID)
    run = build_run(
        night,
        repos={repo: git.Repo(repo)},
        docker_client=docker_client() if executor == "local" else None,  # the head of a Ray run needs no Docker
        server_url=server_url,
        journal=journal,
        observe=lambda _event: None,
    )
    try:
        return run.execute()
    finally:
        journal.close()


def scenario(tmp: str) -> dict[str, Any]:
    """Both executors on clones of one repository; what each left, for the parent to compare."""
    import ray
    from ray.cluster_utils import Cluster

    from agent.ray_executor import NODE_RESOURCE

    base = Path(tmp)
    origin = make_repo(base / "origin", SAMPLE_FILES)
    results: dict[str, Any] = {}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        ray.init(address=cluster.address, logging_level="WARNING")
        git.Repo.clone_from(origin, base / "no-worker")
        alone = one_run(base / "no-worker", base / "runs-no-worker", "http://127.0.0.1:9/v1", "ray", cluster.address)
        results["without_worker"] = [(task.status, task.reason) for task in alone.tasks]
        cluster.add_node(num_cpus=1, resources={NODE_RESOURCE: 1})
        cluster.wait_for_nodes()
        nodes = {node["NodeID"]: node["Resources"] for node in ray.nodes() if node["Alive"]}
        results["nodes_with_resource"] = sum(NODE_RESOURCE in resources for resources in nodes.values())
        for executor in ("local", "ray"):
            repo = base / executor
            git.Repo.clone_from(origin, repo)
            with ScriptedServer(scripts=scripts()) as server:
                summary = one_run(repo, base / f"runs-{executor}", server.url, executor, cluster.address)
            user = git.Repo(repo)
            directory = base / f"runs-{executor}" / RUN_ID
            results[executor] = {
                # Each run has its own clone: the rows must name it, the head's repository, not a worker's copy.
                "rows": [task.model_dump(mode="json", exclude={*VOLATILE, "repo"}) for task in summary.tasks],
                "repos_named": [task.repo == str(repo) for task in summary.tasks],
                "trees": {task.branch: user.commit(task.branch).tree.hexsha for task in summary.tasks if task.commit},
                "branches": sorted(head.name for head in user.heads if head.name.startswith("refactor-agent/")),
                "events": [
                    (event["task"], event["type"])
                    for event in map(json.loads, (directory / "transcript.jsonl").read_text().splitlines())
                    if event["task"] is not None and event["type"] not in ("baseline", "prefill_progress")
                ],
                "patch": (directory / "patch.diff").read_text(),
                "exit_code": summary.exit_code,
            }
    finally:
        ray.shutdown()
        cluster.shutdown()
    return results


def _in_loopback_namespace(tmp: str, queue: Any) -> None:
    try:
        os.setsid()  # one process group with the Ray processes it starts, so the parent can end them all
        # os.unshare arrived in Python 3.12; the C call is the same.
        if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed (it needs root)")
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        queue.put(("ok", scenario(tmp)))
    except BaseException:
        queue.put(("error", traceback.format_exc()))


def test_the_ray_executor_leaves_the_same_branches_and_report_rows_as_the_local_one(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_in_loopback_namespace, args=(str(tmp_path), queue))
    child.start()
    try:
        status, results = queue.get(timeout=540)
        child.join(60)
    finally:
        if child.is_alive():  # a hung scenario: end it with the Ray processes it started (its process group)
            os.killpg(child.pid, signal.SIGKILL)
    assert status == "ok", results
    assert results["without_worker"] == [("failed", f"ray: {NO_NODE}")] * 2, "no node for the tasks: no hang"
    assert results["nodes_with_resource"] == 1, "only the worker offers the resource: the tasks ran on it"
    local, remote = results["local"], results["ray"]
    assert local["rows"] and [row["verdict"] for row in local["rows"]] == ["verified", "verified"]
    assert remote["rows"] == local["rows"]
    assert remote["repos_named"] == local["repos_named"] == [True, True]
    assert remote["trees"] == local["trees"] and len(local["trees"]) == 2
    assert remote["branches"] == local["branches"]
    assert sorted(remote["events"]) == sorted(local["events"]), "one transcript: every task's events came back"
    assert remote["patch"] == local["patch"]
    assert remote["exit_code"] == local["exit_code"] == 0
