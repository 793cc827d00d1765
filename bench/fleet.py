"""Tasks per hour of one run of 4 tasks: one server with one slot and with two (--parallel 2), a fleet of two,
and a local Ray cluster (scripted model).

    .venv/bin/python bench/fleet.py [--tasks 4] [--model-seconds 3]

As root it re-runs itself in a loopback-only network namespace (`unshare -n`), where Ray binds 127.0.0.1 and
sends nothing anywhere else. Each task is real apart from the model: its worktree, the Docker sandbox, the
repository packed, the baseline and the gate's test runs, the commit. The model is the scripted llama-server
(tests/support/scripted_server.py) that spends --model-seconds on each of a task's two replies in prefill progress, a
stand-in for a GPU's time; every configuration runs the same tasks on a fresh clone of the same repository.

- one server: `run --server A`, the tasks one after the other (N = 1);
- one server, two slots: `run --server A --parallel 2`, two tasks at once, each pinned to a slot (N = 2); the
  scripted server answers both at full speed, as a GPU server batching two slots roughly does (the embedded
  model's throughput with 1 and 2 slots on this CPU is bench/parallel_slots.py's);
- two servers: `run --server A --server B`, two tasks at once, one per server;
- Ray: `run --executor ray` on a local cluster (a head, and one worker node offering `refactor-agent: 2`), both
  Ray tasks on one scripted server with two slots, which answers them concurrently (each task's process takes a
  slot of its own).

Writes bench/out/fleet.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import git
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
sys.path.insert(0, str(ROOT / "tests"))

from agent.protocol.config import LLMConfig, NightConfig, RunConfig  # noqa: E402
from agent.record.journal import RunJournal  # noqa: E402
from agent.run.command import task_dispatch  # noqa: E402
from agent.run.compose import build_run  # noqa: E402
from agent.run.sandboxes import DockerSandboxes  # noqa: E402

from support.repos import SAMPLE_FILES, make_repo  # noqa: E402
from support.scripted_server import Reply, ScriptedServer  # noqa: E402

IN_NAMESPACE = "--in-loopback-namespace"


class Measurement(BaseModel):
    configuration: str
    tasks: int
    committed: int
    wall_s: float
    tasks_per_hour: int


def task_texts(count: int) -> list[str]:
    return [f"Add module number {n}" for n in range(1, count + 1)]


def scripts(tasks: list[str], model_seconds: float) -> dict[str, list[Reply]]:
    chunks = 10
    slow = {"prefill_chunks": chunks, "prefill_interval_s": model_seconds / chunks}
    return {
        text: [
            Reply(tool_calls=[("create_file", {"path": f"pkg/m{n}.py", "content": f"N = {n}\n"})], **slow),
            Reply(tool_calls=[("finish", {"summary": f"Add pkg/m{n}.py"})], **slow),
        ]
        for n, text in enumerate(tasks, start=1)
    }


def measure(
    name: str,
    origin: Path,
    scratch: Path,
    tasks: list[str],
    urls: list[str],
    executor: str,
    address: str | None,
    parallel: int = 1,
) -> Measurement:
    repo = scratch / name.replace(" ", "-")
    git.Repo.clone_from(origin, repo)
    llm = LLMConfig(server_url=urls[0], server_explicit=True, servers=urls if len(urls) > 1 else [])
    config = RunConfig(
        repo=repo,
        tasks=tasks,
        runs_dir=scratch / f"runs-{repo.name}",
        llm=llm,
    )
    night = NightConfig(
        repos=[config], runs_dir=config.runs_dir, executor=executor, ray_address=address, parallel=parallel
    )
    journal = RunJournal(config.runs_dir, "bench")
    run = build_run(
        night,
        repos={repo: git.Repo(repo)},
        sandboxes=DockerSandboxes() if executor == "local" else None,
        server_url=urls[0],
        journal=journal,
        observe=lambda _event: None,
        dispatch=task_dispatch(night),
    )
    started = time.monotonic()
    try:
        summary = run.execute()
    finally:
        journal.close()
    wall = time.monotonic() - started
    committed = sum(task.status == "committed" for task in summary.tasks)
    return Measurement(
        configuration=name,
        tasks=len(tasks),
        committed=committed,
        wall_s=round(wall, 1),
        tasks_per_hour=round(committed / wall * 3600),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--model-seconds", type=float, default=3.0)
    parser.add_argument(IN_NAMESPACE, action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if not options.in_loopback_namespace:
        command = " ".join([sys.executable, *sys.argv, IN_NAMESPACE])
        os.execvp("unshare", ["unshare", "-n", "sh", "-c", f"ip link set lo up && exec {command}"])

    import ray
    from ray.cluster_utils import Cluster

    from agent.dispatch.ray_head import NODE_RESOURCE

    tasks = task_texts(options.tasks)
    results: list[Measurement] = []
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as directory:
        scratch = Path(directory)
        origin = make_repo(scratch / "origin", SAMPLE_FILES)
        script = scripts(tasks, options.model_seconds)
        with ScriptedServer(scripts=script) as only:
            results.append(measure("one server", origin, scratch, tasks, [only.url], "local", None))
        with ScriptedServer(scripts=script, slots=2) as slotted:
            results.append(
                measure("one server, --parallel 2", origin, scratch, tasks, [slotted.url], "local", None, parallel=2)
            )
        with ScriptedServer(scripts=script) as first, ScriptedServer(scripts=script) as second:
            results.append(measure("two servers", origin, scratch, tasks, [first.url, second.url], "local", None))
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        try:
            cluster.add_node(num_cpus=2, resources={NODE_RESOURCE: 2})
            ray.init(address=cluster.address, logging_level="WARNING")
            with ScriptedServer(scripts=script, slots=2) as shared:
                results.append(measure("Ray, 2 at once", origin, scratch, tasks, [shared.url], "ray", cluster.address))
        finally:
            ray.shutdown()
            cluster.shutdown()
    OUT.mkdir(parents=True, exist_ok=True)
    payload = {
        "model_seconds_per_reply": options.model_seconds,
        "cpus": os.cpu_count(),
        "results": [result.model_dump() for result in results],
    }
    (OUT / "fleet.json").write_text(json.dumps(payload, indent=2) + "\n")
    print("| configuration | tasks | committed | wall (s) | tasks/hour |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for result in results:
        print(
            f"| {result.configuration} | {result.tasks} | {result.committed} | {result.wall_s} | "
            f"{result.tasks_per_hour} |"
        )
    print(json.dumps(payload))


if __name__ == "__main__":
    main()
