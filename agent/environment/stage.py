"""The environment as a stage of a run (and of `env build`): resolve the plan, reuse or build the image, and
check the test command collects in it with the committed tree mounted. Never raises for a build that fails:
the record says so, and the tasks run unverified with that reason."""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import docker
import docker.errors
import git

from agent.environment.build import BuildLog, EnvironmentBuilder, EnvironmentBuildError
from agent.environment.committed import CommittedFileError, committed_tree
from agent.environment.detect import DetectionError
from agent.environment.devcontainer import DevcontainerError
from agent.environment.plan import EnvironmentPlan
from agent.environment.sources import resolve_plan
from agent.environment.spec import EnvironmentSpec
from agent.report import EnvironmentRecord
from sandbox import DockerSandbox, SandboxError, SandboxLimits
from sandbox.errors import one_line
from tools.test_command import detect_test_command

COLLECT_TIMEOUT_S = 300
ENV_BUILD_LOG = "env-build.log"
_COLLECTED = re.compile(r"(\d+) tests? collected|collected (\d+) items?")
PLAN_ERRORS = (CommittedFileError, DetectionError, DevcontainerError)

Log = Callable[[str], None]


def collect_tests(
    client: docker.DockerClient, image: str, snapshot: Path, test_command: str | None
) -> tuple[int | None, str]:
    """How many tests the test command finds in the environment, run with no network on the committed tree."""
    if test_command is None:
        return None, "no test command found"
    if "pytest" not in test_command:
        return None, f"collection is checked for pytest only, not for `{test_command}`"
    with DockerSandbox(image, snapshot, run_id="env-check", client=client, limits=SandboxLimits()) as sandbox:
        result = sandbox.execute(f"{test_command} --collect-only -p no:cacheprovider", timeout_s=COLLECT_TIMEOUT_S)
    lines = [line for line in result.output.splitlines() if line.strip()]
    found = next((match for line in reversed(lines) if (match := _COLLECTED.search(line))), None)
    collected = int(found.group(1) or found.group(2)) if found else None
    if result.exit_code == 0:
        return collected, ""
    last = lines[-1][:300] if lines else "no output"
    return collected, f"collection exit code {result.exit_code}: {last}"


def prepare_environment(
    repo: git.Repo,
    *,
    client: docker.DockerClient,
    sandbox_image: str,
    image_explicit: bool,
    spec: EnvironmentSpec | None,
    test_command: str | None,
    log_path: Path,
    progress: Log,
) -> EnvironmentRecord:
    repository = Path(str(repo.working_tree_dir)).name
    with committed_tree(repo) as tree, tempfile.TemporaryDirectory(prefix="refactor-agent-env-") as scratch:
        try:
            plan = resolve_plan(tree, sandbox_image=sandbox_image, image_explicit=image_explicit, spec=spec)
        except PLAN_ERRORS as error:
            return EnvironmentRecord(
                source="unknown", description="", image=sandbox_image, status="failed", error=str(error)
            )
        snapshot = Path(scratch) / "tree"
        tree.snapshot(snapshot)
        return _realise(client, plan, repository, snapshot, test_command, log_path, progress)


def _realise(
    client: docker.DockerClient,
    plan: EnvironmentPlan,
    repository: str,
    snapshot: Path,
    test_command: str | None,
    log_path: Path,
    progress: Log,
) -> EnvironmentRecord:
    test_command = test_command or detect_test_command(snapshot)
    record = EnvironmentRecord(
        source=plan.source, description=plan.description, image=plan.base_image or "", status="as_is"
    )
    started = time.monotonic()
    try:
        if plan.builds:
            builder = EnvironmentBuilder(client, plan, repository=repository)
            record.image = builder.tag()
            if _exists(client, record.image):
                record.status = "reused"
                progress(f"reusing {record.image} ({plan.description})")
            else:
                with BuildLog(log_path, progress) as log:
                    builder.build(record.image, snapshot, log)
                record.status, record.log = "built", str(log_path)
        record.tests_collected, record.collect_note = collect_tests(client, record.image, snapshot, test_command)
    except EnvironmentBuildError as error:
        record.status, record.error, record.failed_step = "failed", str(error), error.step
        record.log, record.log_tail = str(error.log_path), error.tail
    except (SandboxError, docker.errors.DockerException) as error:
        record.status, record.error = "failed", f"environment build failed: {one_line(error)}"
        record.log = str(log_path) if log_path.exists() else None
    record.build_s = round(time.monotonic() - started, 3)
    return record


def _exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def describe_environment(
    repo: git.Repo,
    *,
    client: docker.DockerClient,
    sandbox_image: str,
    image_explicit: bool,
    spec: EnvironmentSpec | None,
) -> tuple[bool, str]:
    """For `doctor --repo`: which source wins, and whether its image is built; (False, why) when it cannot be."""
    repository = Path(str(repo.working_tree_dir)).name
    with committed_tree(repo) as tree:
        try:
            plan = resolve_plan(tree, sandbox_image=sandbox_image, image_explicit=image_explicit, spec=spec)
        except PLAN_ERRORS as error:
            return False, str(error)
    if not plan.builds:
        return True, f"{plan.source}: {plan.description}"
    try:
        tag = EnvironmentBuilder(client, plan, repository=repository).tag()
    except (SandboxError, docker.errors.DockerException) as error:
        return False, f"{plan.source}: {plan.description}: {one_line(error)}"
    state = "built" if _exists(client, tag) else "not built yet (the next run builds it, or `refactor-agent env build`)"
    return True, f"{plan.source}: {plan.description}; image {tag} {state}"
