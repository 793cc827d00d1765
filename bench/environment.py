"""Benchmark the environment stage on a real project: its PyPI source release turned into a git repository.

    .venv/bin/python bench/environment.py [--release requests==2.34.2]

The release is downloaded with `pip download --no-binary :all: --no-deps` (cached in bench/out/downloads),
unpacked and committed. Its environment images are removed first, so the first prepare is a cold build (packages
from the host's index configuration, through the host's network, in the build only); the second finds the image
by its digest. Then the suite runs as the gate's baseline does, in a sandbox with no network on a copy of the
committed tree. Writes bench/out/environment.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import docker
import git
from pydantic import BaseModel

from agent.environment.committed import committed_tree
from agent.environment.plan import ENV_REPOSITORY, repository_slug
from agent.environment.stage import prepare_environment
from agent.gate.suite import run_suite
from agent.report import EnvironmentRecord
from sandbox import DEFAULT_IMAGE, DockerSandbox, docker_client
from tools.test_command import detect_test_command

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
SUITE_TIMEOUT_S = 1800


class Measurement(BaseModel):
    project: str
    source: str
    description: str
    image: str
    build_s: float
    reuse_s: float
    reused: bool
    tests_collected: int | None
    baseline: str
    baseline_s: float
    test_command: str


def run(command: list[str], **kwargs: object) -> None:
    subprocess.run(command, check=True, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]


def source_repository(release: str) -> Path:
    downloads = OUT / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    name, _, version = release.partition("==")
    archives = sorted(downloads.glob(f"{name}-{version}*.tar.gz"))
    if not archives:
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-binary",
                ":all:",
                "--no-deps",
                "-q",
                "-d",
                str(downloads),
                release,
            ]
        )
        archives = sorted(downloads.glob(f"{name}-{version}*.tar.gz"))
    target = OUT / "environment" / name
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archives[-1]) as archive:
        archive.extractall(target.parent, filter="data")
    (target.parent / archives[-1].name.removesuffix(".tar.gz")).rename(target)
    run(["git", "init", "-q", "-b", "main"], cwd=target)
    run(["git", "add", "-A"], cwd=target)
    run(["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-qm", release], cwd=target)
    return target


def remove_images(client: docker.DockerClient, repository: str) -> None:
    prefix = f"{ENV_REPOSITORY}:{repository_slug(repository)}-"
    for image in client.images.list(name=ENV_REPOSITORY):
        for tag in image.tags:
            if tag.startswith(prefix):
                client.images.remove(tag, force=True)


def measure(release: str) -> Measurement:
    repo_path = source_repository(release)
    client = docker_client(timeout_s=1800)
    remove_images(client, repo_path.name)
    repo = git.Repo(repo_path)

    def prepare(log: Path) -> tuple[EnvironmentRecord, float]:
        started = time.monotonic()
        record = prepare_environment(
            repo,
            client=client,
            sandbox_image=DEFAULT_IMAGE,
            image_explicit=False,
            spec=None,
            test_command=None,
            log_path=log,
            progress=lambda message: print(f"  {message}", flush=True),
        )
        return record, time.monotonic() - started

    built, build_s = prepare(OUT / "environment" / f"{repo_path.name}-build.log")
    if built.status == "failed":
        raise SystemExit(f"build failed: {built.error}\n" + "\n".join(built.log_tail))
    reused, reuse_s = prepare(OUT / "environment" / f"{repo_path.name}-reuse.log")
    with committed_tree(repo) as tree, tempfile.TemporaryDirectory() as scratch:
        snapshot = Path(scratch) / "tree"
        tree.snapshot(snapshot)
        command = detect_test_command(snapshot) or "python3 -m pytest -q"
        with DockerSandbox(built.image, snapshot, run_id="bench-env", client=client) as sandbox:
            suite = run_suite(sandbox, command, timeout_s=SUITE_TIMEOUT_S)
    return Measurement(
        project=release,
        source=built.source,
        description=built.description,
        image=built.image,
        build_s=round(build_s, 1),
        reuse_s=round(reuse_s, 1),
        reused=reused.status == "reused",
        tests_collected=built.tests_collected,
        baseline=suite.describe(),
        baseline_s=round(suite.duration_s, 1),
        test_command=command,
    )


def table(measurements: list[Measurement]) -> str:
    lines = [
        "| project | source | build s (cold) | reuse s | tests collected | baseline, sandbox without network "
        "| suite s |",
        "| --- | --- | ---: | ---: | ---: | --- | ---: |",
    ]
    for m in measurements:
        reuse = f"{m.reuse_s:.1f}" if m.reused else f"{m.reuse_s:.1f} (rebuilt!)"
        lines.append(
            f"| {m.project} | {m.description} | {m.build_s:.1f} | {reuse} | {m.tests_collected} | {m.baseline} "
            f"| {m.baseline_s:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", action="append", help="pip requirement of a source release")
    arguments = parser.parse_args()
    measurements = [measure(release) for release in arguments.release or ["requests==2.34.2"]]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "environment.json").write_text(json.dumps([m.model_dump() for m in measurements], indent=1) + "\n")
    print(table(measurements))


if __name__ == "__main__":
    main()
