"""`--executor ray` on a local two-node Ray cluster (a head, and a worker offering the `refactor-agent` resource)
gives the same branches (same trees) and the same report rows as the local executor for the same tasks, and
holds the night's deadline and a task's time limit on the worker.

Everything runs in a child process inside a loopback-only network namespace (Ray advertises and probes the
machine's network address otherwise; see docs): the cluster, one for the module, the scripted servers, the runs.
Docker keeps working there (its daemon is reached over its unix socket).
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import git
import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.dispatch.ray_head import NODE_HINT
from agent.protocol.config import LLMConfig, NightConfig, RunConfig
from agent.protocol.records import RunSummary
from agent.record.journal import RunJournal
from agent.run.command import task_dispatch
from agent.run.compose import build_run
from agent.run.sandboxes import DockerSandboxes

from support.namespaces import in_loopback_namespace
from support.repos import SAMPLE_FILES, make_repo
from support.scripted_server import Reply, ScriptedServer

pytestmark = [pytest.mark.ray, pytest.mark.docker]

TASKS = {"alpha": "Add the alpha module", "beta": "Document compute_area"}
RUN_ID = "20261201-000000-abcd"
NIGHT_BRANCH = "refactor-agent/nightly/add-the-alpha-module"
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


def one_run(
    repo: Path,
    runs_dir: Path,
    server_url: str,
    executor: str,
    address: str,
    *,
    tasks: list[str] | None = None,
    task_timeout_s: float | None = None,
    **night_settings: Any,
) -> RunSummary:
    llm = LLMConfig(server_url=server_url, server_explicit=True, max_retries=1, retry_backoff_s=0.2)
    config = RunConfig(
        repo=repo,
        tasks=tasks or list(TASKS.values()),
        runs_dir=runs_dir,
        max_turns=10,
        llm=llm,
        task_timeout_s=task_timeout_s,
    )
    night = NightConfig(
        repos=[config],
        runs_dir=runs_dir,
        executor=executor,
        ray_address=address if executor == "ray" else None,
        **night_settings,
    )
    journal = RunJournal(runs_dir, RUN_ID)
    run = build_run(
        night,
        repos={repo: git.Repo(repo)},
        sandboxes=DockerSandboxes() if executor == "local" else None,  # the head of a Ray run needs no Docker
        server_url=server_url,
        journal=journal,
        observe=lambda _event: None,
        dispatch=task_dispatch(night),
    )
    try:
        return run.execute()
    finally:
        journal.close()


def without_a_worker(base: Path, address: str) -> dict[str, Any]:
    """A run on the cluster before any node offers the resource."""
    repo = make_repo(base / "no-worker", SAMPLE_FILES)
    alone = one_run(repo, base / "runs-no-worker", "http://127.0.0.1:9/v1", "ray", address)
    return {"tasks": [(task.status, task.reason) for task in alone.tasks]}


def both_executors(base: Path, address: str) -> dict[str, Any]:
    """Both executors on clones of one repository; what each left, for the parent to compare."""
    origin = make_repo(base / "origin", SAMPLE_FILES)
    results: dict[str, Any] = {}
    for executor in ("local", "ray"):
        repo = base / executor
        git.Repo.clone_from(origin, repo)
        with ScriptedServer(scripts=scripts()) as server:
            summary = one_run(repo, base / f"runs-{executor}", server.url, executor, address)
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
                if event["task"] is not None
                and event["type"] not in ("baseline", "gate_start", "prefill_progress", "generation_progress")
            ],
            "patch": (directory / "patch.diff").read_text(),
            "exit_code": summary.exit_code,
        }
    return results


def time_limits(base: Path, address: str) -> dict[str, Any]:
    """A task over its --task-timeout, then a night whose deadline leaves no time to start its tasks."""
    repo = make_repo(base / "repo", SAMPLE_FILES)
    create = ("create_file", {"path": "pkg/alpha.py", "content": "NAME = 'alpha'\n"})
    # The server keeps prefilling the second request for ten minutes, streaming its progress.
    endless = Reply(tool_calls=[("finish", {"summary": "Add it"})], prefill_chunks=6000, prefill_interval_s=0.1)
    results: dict[str, Any] = {}
    with ScriptedServer(scripts={TASKS["alpha"]: [Reply(tool_calls=[create]), endless]}) as server:
        timed = one_run(
            repo, base / "runs-timeout", server.url, "ray", address, tasks=[TASKS["alpha"]], task_timeout_s=10
        )
    (task,) = timed.tasks
    commit = git.Repo(repo).commit(task.branch) if task.commit else None
    results["timed_out"] = {
        "status": task.status,
        "reason": task.reason,
        "wall_time_s": task.wall_time_s,
        "files": sorted(commit.stats.files) if commit else [],
        "message": commit.message if commit else "",
    }
    with ScriptedServer(scripts=scripts()) as server:
        late = one_run(
            make_repo(base / "late-repo", SAMPLE_FILES),
            base / "runs-deadline",
            server.url,
            "ray",
            address,
            deadline_at=datetime.now().astimezone() + timedelta(minutes=30),
            min_task_time_s=3600,
        )
        results["requests_after_deadline"] = len(server.requests)
    results["late"] = [(task.status, task.reason) for task in late.tasks]
    return results


def named_night(base: Path, address: str) -> dict[str, Any]:
    """A named night on Ray (the `night` command, `executor = "ray"`), twice, main moved in between."""
    repo = make_repo(base / "repo", SAMPLE_FILES)
    night_file = base / "nightly.toml"
    results: dict[str, Any] = {}

    def night(key: str) -> None:
        with ScriptedServer(scripts=scripts()) as server:
            night_file.write_text(
                f'name = "nightly"\n[defaults]\nserver = "{server.url}"\nruns_dir = "{base / "runs"}"\n'
                f'executor = "ray"\naddress = "{address}"\nmax_turns = 5\nmax_retries = 0\n'
                f'[[repo]]\npath = "{repo}"\ntasks = ["{TASKS["alpha"]}"]\n'
            )
            result = CliRunner().invoke(app, ["night", str(night_file)], env={"XDG_CONFIG_HOME": str(base / "xdg")})
            asked = any(TASKS["alpha"] in json.dumps(request["messages"]) for request in server.requests)
        user = git.Repo(repo)
        results[key] = {
            "exit_code": result.exit_code,
            "output": result.output,
            "asked": asked,
            "branches": sorted(head.name for head in user.heads if head.name.startswith("refactor-agent/")),
            "message": user.git.log("-1", "--format=%B", NIGHT_BRANCH) if NIGHT_BRANCH in user.heads else "",
            "parent": user.git.rev_parse(f"{NIGHT_BRANCH}^") if NIGHT_BRANCH in user.heads else "",
            "main": user.git.rev_parse("main"),
        }

    night("first")
    (repo / "NEWS").write_text("main moved\n")
    git.Repo(repo).git.add("NEWS")
    git.Repo(repo).git.commit("-q", "-m", "News")
    night("second")
    return results


def on_one_cluster(tmp: str) -> dict[str, Any]:
    """Every scenario on one local cluster, since starting one costs more than most scenarios: first a run before
    any node offers the resource, then a worker that does joins and the others run. What each left, by name, or
    the traceback of one that raised (it fails only its own test)."""
    import ray
    from ray.cluster_utils import Cluster

    from agent.dispatch.ray_head import NODE_RESOURCE

    base = Path(tmp)
    results: dict[str, Any] = {}

    def play(name: str, scenario: Callable[[Path, str], dict[str, Any]]) -> None:
        (base / name).mkdir()
        try:
            results[name] = scenario(base / name, cluster.address)
        except Exception:
            results[name] = {"error": traceback.format_exc()}

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        ray.init(address=cluster.address, logging_level="WARNING")
        play("without_worker", without_a_worker)
        cluster.add_node(num_cpus=1, resources={NODE_RESOURCE: 1})
        cluster.wait_for_nodes()
        nodes = {node["NodeID"]: node["Resources"] for node in ray.nodes() if node["Alive"]}
        results["nodes_with_resource"] = sum(NODE_RESOURCE in resources for resources in nodes.values())
        play("executors", both_executors)
        play("time_limits", time_limits)
        play("night", named_night)
    finally:
        ray.shutdown()
        cluster.shutdown()
    return results


@pytest.fixture(scope="module")
def cluster_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return in_loopback_namespace(on_one_cluster, tmp_path_factory.mktemp("ray"))


def played(cluster_results: dict[str, Any], name: str) -> dict[str, Any]:
    results = cluster_results[name]
    assert "error" not in results, results["error"]
    return results


def test_the_ray_executor_leaves_the_same_branches_and_report_rows_as_the_local_one(
    cluster_results: dict[str, Any],
) -> None:
    alone = played(cluster_results, "without_worker")
    assert alone["tasks"] == [("failed", f"ray: {NO_NODE}")] * 2, "no node for the tasks: no hang"
    assert cluster_results["nodes_with_resource"] == 1, "only the worker offers the resource: the tasks ran on it"
    results = played(cluster_results, "executors")
    local, remote = results["local"], results["ray"]
    assert local["rows"] and [row["verdict"] for row in local["rows"]] == ["verified", "verified"]
    assert remote["rows"] == local["rows"]
    assert remote["repos_named"] == local["repos_named"] == [True, True]
    assert remote["trees"] == local["trees"] and len(local["trees"]) == 2
    assert remote["branches"] == local["branches"]
    assert sorted(remote["events"]) == sorted(local["events"]), "one transcript: every task's events came back"
    assert remote["patch"] == local["patch"]
    assert remote["exit_code"] == local["exit_code"] == 0


def test_on_ray_a_task_over_its_time_limit_is_timed_out_and_the_deadline_skips_tasks_on_the_worker(
    cluster_results: dict[str, Any],
) -> None:
    results = played(cluster_results, "time_limits")
    timed = results["timed_out"]
    assert (timed["status"], timed["files"]) == ("timed_out", ["pkg/alpha.py"]), timed
    assert timed["reason"].startswith("--task-timeout 10s: stopped at ")
    assert timed["wall_time_s"] < 300, "stopped at its limit on the worker, not when the server's prefill ended"
    assert "Refactor-Agent-Status: timed_out" in timed["message"].splitlines()
    assert [status for status, _ in results["late"]] == ["skipped", "skipped"]
    assert all(reason.startswith("deadline: ") and "--min-task-time 1h00m" in reason for _, reason in results["late"])
    assert results["requests_after_deadline"] == 0


def test_a_named_night_on_ray_commits_as_here_and_refreshes_a_stale_task_on_the_worker(
    cluster_results: dict[str, Any],
) -> None:
    """The same commit as the in-order and fleet paths (the Refactor-Agent-Task trailer, the plan's base), so the
    next night finds the task: main moved, it is rebased on the worker without the model and published."""
    results = played(cluster_results, "night")
    first, second = results["first"], results["second"]
    assert first["exit_code"] == 0, first["output"]
    assert first["branches"] == [NIGHT_BRANCH]
    assert "Refactor-Agent-Task: nightly/t-" in first["message"], first["message"]
    assert second["exit_code"] == 0, second["output"]
    assert f"main moved ({first['main'][:12]} → {second['main'][:12]})" in second["output"]
    assert not second["asked"], "rebased on the worker without the model"
    assert second["branches"] == [NIGHT_BRANCH] and second["parent"] == second["main"]
    assert f"Refactor-Agent-Rebased-Onto: {second['main']}" in second["message"]
    assert "Refactor-Agent-Task: nightly/t-" in second["message"]
