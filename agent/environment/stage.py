"""The environment as a stage of a run (and of `env build`): resolve the plan, reuse or build the image, and
check the test command collects in it with the committed tree mounted. Never raises for a build that fails:
the record says so, and the tasks run unverified with that reason. The night's deadline stops it like a failure."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import docker
import docker.errors
import git

from agent.environment.bases import BaseImages
from agent.environment.build import BuildClock, BuildLog, EnvironmentBuilder, EnvironmentBuildError
from agent.environment.committed import CommittedFileError, CommittedTree, committed_tree
from agent.environment.detect import DetectionError
from agent.environment.devcontainer import DevcontainerError
from agent.environment.plan import EnvironmentPlan
from agent.environment.sources import resolve_plan
from agent.gate.test_command import choose_test_command
from agent.protocol.environment import EnvironmentSpec
from agent.protocol.records import EnvironmentRecord
from agent.worktree.leftovers import build_scratch
from sandbox import DockerSandbox, SandboxError, SandboxLimits
from sandbox.errors import one_line
from sandbox.image import ensure_suite_image

COLLECT_TIMEOUT_S = 300
ENV_BUILD_LOG = "env-build.log"
# pytest's count, last line first: "N tests collected", or "S/N tests collected (D deselected)" when a conftest or
# -k/-m deselects some (click's conftest deselects 31,000 of 33,016), and in its header "collected N items" with
# "/ S selected" then: the tests that run are the S selected.
_COLLECTED = re.compile(
    r"(?:(?P<selected_of>\d+)/)?(?P<tests>\d+) tests? collected"
    r"|collected (?P<items>\d+) items?(?:.* / (?P<selected>\d+) selected)?"
)
PLAN_ERRORS = (CommittedFileError, DetectionError, DevcontainerError)

Log = Callable[[str], None]


def collected_count(lines: list[str]) -> int | None:
    """The tests pytest's --collect-only output says will run; None when it says no number."""
    found = next((match for line in reversed(lines) if (match := _COLLECTED.search(line))), None)
    if found is None:
        return None
    return int(found["selected_of"] or found["tests"] or found["selected"] or found["items"])


def collect_tests(
    client: docker.DockerClient, image: str, snapshot: Path, test_command: str | None, clock: BuildClock
) -> tuple[int | None, str]:
    """How many tests the test command finds in the environment, run with no network on the committed tree."""
    if test_command is None:
        return None, "no test command found"
    if "pytest" not in test_command:
        return None, f"collection is checked for pytest only, not for `{test_command}`"
    seconds, _ = clock.step_limit()
    if seconds <= 0:
        return None, "not checked: the night's deadline has passed"
    with DockerSandbox(image, snapshot, run_id="env-check", client=client, limits=SandboxLimits()) as sandbox:
        timeout = min(COLLECT_TIMEOUT_S, seconds)
        result = sandbox.execute(f"{test_command} --collect-only -p no:cacheprovider", timeout_s=timeout)
    lines = [line for line in result.output.splitlines() if line.strip()]
    collected = collected_count(lines)
    if result.exit_code == 0:
        return collected, ""
    last = lines[-1][:300] if lines else "no output"
    return collected, f"collection exit code {result.exit_code}: {last}"


def _plan(
    tree: CommittedTree,
    client: docker.DockerClient,
    sandbox_image: str,
    image_explicit: bool,
    spec: EnvironmentSpec | None,
    allowed_base_images: Sequence[str],
) -> EnvironmentPlan:
    """The plan, with the images on this machine as the daemon knows them."""
    bases = BaseImages.of(sandbox_image, allowed_base_images, lambda image: _exists(client, image))
    return resolve_plan(tree, sandbox_image=sandbox_image, image_explicit=image_explicit, spec=spec, bases=bases)


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
    allowed_base_images: Sequence[str] = (),
    deadline: float | None = None,
    revision: str = "HEAD",
) -> EnvironmentRecord:
    """`deadline` (time.time()) is the night's end: a build still going then is stopped and recorded as failed."""
    repository = Path(str(repo.working_tree_dir)).name
    with committed_tree(repo, revision) as tree, build_scratch() as scratch:
        snapshot, tools = scratch / "tree", scratch / "tools"
        try:
            plan = _plan(tree, client, sandbox_image, image_explicit, spec, allowed_base_images)
            tree.snapshot(snapshot)  # a tree git cannot write out leaves the tasks unverified, not the night undone
        except PLAN_ERRORS as error:
            return EnvironmentRecord(
                source="unknown", description="", image=sandbox_image, status="failed", error=str(error)
            )
        for skipped in plan.skipped:
            progress(f"environment: {skipped}; instead: {plan.description}")
        tools.mkdir()
        builder = EnvironmentBuilder(
            client, plan, repository=repository, sandbox_image=sandbox_image, clock=BuildClock(deadline)
        )
        return _realise(builder, snapshot, tools, test_command, log_path, progress)


def _realise(
    builder: EnvironmentBuilder,
    snapshot: Path,
    tools: Path,
    test_command: str | None,
    log_path: Path,
    progress: Log,
) -> EnvironmentRecord:
    plan, client = builder.plan, builder.client
    chosen = choose_test_command(test_command, snapshot)
    test_command = chosen.command if chosen is not None else None
    record = EnvironmentRecord(
        source=plan.source,
        description=plan.description,
        image=plan.base_image or "",
        status="as_is",
        sources=plan.used,
        skipped=plan.skipped,
        test_command=test_command,
        test_command_source=chosen.source if chosen is not None else "none found",
    )
    started = time.monotonic()
    try:
        if plan.builds:
            if plan.base_image is not None:
                ensure_suite_image(client, plan.base_image, log=progress)
            record.image = builder.tag()
            if _exists(client, record.image):
                record.status = "reused"
                progress(f"reusing {record.image} ({plan.description})")
            else:
                with BuildLog(log_path, progress) as log:
                    builder.build(record.image, snapshot, tools, log)
                record.status, record.log = "built", str(log_path)
        record.tests_collected, record.collect_note = collect_tests(
            client, record.image, snapshot, test_command, builder.clock
        )
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
    allowed_base_images: Sequence[str] = (),
) -> tuple[bool, str]:
    """For `doctor --repo`: which source wins, the sources used and skipped (with why), and whether its image is
    built; (False, why) when it cannot be."""
    repository = Path(str(repo.working_tree_dir)).name
    with committed_tree(repo) as tree:
        try:
            plan = _plan(tree, client, sandbox_image, image_explicit, spec, allowed_base_images)
        except PLAN_ERRORS as error:
            return False, str(error)
    sources = f"{plan.source}: {plan.description}" + "".join(f"; skipped {line}" for line in plan.skipped)
    if not plan.builds:
        return True, sources
    try:
        tag = EnvironmentBuilder(client, plan, repository=repository, sandbox_image=sandbox_image).tag()
    except (SandboxError, docker.errors.DockerException) as error:
        return False, f"{sources}: {one_line(error)}"
    state = "built" if _exists(client, tag) else "not built yet (the next run builds it, or `refactor-agent env build`)"
    return True, f"{sources}; image {tag} {state}"
