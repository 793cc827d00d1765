"""Building the sandbox image: from the Dockerfile, or from a root filesystem made by debootstrap."""

import io
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from pathlib import Path

import docker
import docker.errors
from docker.utils import parse_repository_tag

from sandbox.daemon import docker_client
from sandbox.errors import SandboxError, one_line
from sandbox.mirrors import choose_mirror
from sandbox.models import DEFAULT_IMAGE
from sandbox.suites import DEFAULT_SUITE, PYTHON_OF_SUITE, suite_of_image

ROOTFS_REPOSITORY = "refactor-agent-sandbox-rootfs"
ROOTFS_IMAGE = f"{ROOTFS_REPOSITORY}:{DEFAULT_SUITE}"
# less: the pager suites that page output run for real (click's echo_via_pager tests: 27 of its tests fail without).
BOOTSTRAP_PACKAGES = ("python3", "python3-pytest", "git", "bash", "coreutils", "procps", "less")
PROGRESS_EVERY_S = 20.0
# Importing ~400 MB and building can take minutes on a loaded machine.
BUILD_CLIENT_TIMEOUT_S = 1800

Log = Callable[[str], None]


def build_image(
    tag: str = DEFAULT_IMAGE,
    *,
    base: str | None = None,
    bootstrap: bool = False,
    suite: str = DEFAULT_SUITE,
    log: Log = print,
) -> None:
    """Build the sandbox image `tag` from the Dockerfile, FROM `base` (or Debian `suite`'s slim image).

    With `bootstrap`, the base is first made without any image registry: debootstrap writes a Debian root
    filesystem of `suite` from Debian's packages, which is imported as refactor-agent-sandbox-rootfs:<suite>.
    """
    if bootstrap and base is not None:
        raise SandboxError("choose either --bootstrap or --base: bootstrapping makes its own base")
    if suite not in PYTHON_OF_SUITE:
        raise SandboxError(f"unknown Debian release {suite!r}: choose one of {', '.join(PYTHON_OF_SUITE)}")
    client = docker_client(timeout_s=BUILD_CLIENT_TIMEOUT_S)
    started = time.monotonic()
    try:
        if bootstrap:
            base = f"{ROOTFS_REPOSITORY}:{suite}"
            bootstrap_base_image(client, base, suite=suite, log=log)
        elif base is None and suite != DEFAULT_SUITE:
            base = f"debian:{suite}-slim"
        # The bootstrapped base already holds every package, so its build needs (and gets) no network.
        build_from_dockerfile(client, tag, base=base, network_mode="none" if bootstrap else None, log=log)
    except docker.errors.DockerException as error:
        raise SandboxError(f"building {tag} failed: {one_line(error)}") from error
    log(f"built {tag} in {time.monotonic() - started:.0f}s")


def build_from_dockerfile(
    client: docker.DockerClient, tag: str, *, base: str | None, network_mode: str | None, log: Log
) -> None:
    dockerfile = resources.files("sandbox").joinpath("Dockerfile").read_bytes()
    log(f"building {tag} from the Dockerfile" + (f" FROM {base}" if base else ""))
    stream = client.api.build(
        fileobj=io.BytesIO(dockerfile),
        tag=tag,
        buildargs={"BASE": base} if base else None,
        network_mode=network_mode,
        rm=True,
        forcerm=True,
        decode=True,
    )
    for chunk in stream:
        if "error" in chunk:
            raise SandboxError(f"docker build of {tag} failed: {one_line(chunk['error'])}")
        text = str(chunk.get("stream", "")).strip()
        if text:
            log(f"  {text}")


def ensure_suite_image(client: docker.DockerClient, image: str, *, log: Log) -> None:
    """The sandbox image of another Debian release (image_for_suite), made when a repository first needs it (for
    its requires-python): with debootstrap, as root; otherwise the error says how to make it."""
    suite = suite_of_image(image)
    if suite is None:
        return
    try:
        client.images.get(image)
        return
    except docker.errors.ImageNotFound:
        pass
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        raise SandboxError(
            f"{image} (Python {PYTHON_OF_SUITE[suite]}) is not built: run `refactor-agent sandbox build --suite "
            f"{suite} --bootstrap` as root, or `--suite {suite}` with registry access"
        )
    log(f"{image} (Python {PYTHON_OF_SUITE[suite]}) is needed and not built: making it now, once (minutes)")
    build_image(image, bootstrap=True, suite=suite, log=log)


def bootstrap_base_image(
    client: docker.DockerClient,
    tag: str,
    *,
    packages: Sequence[str] = BOOTSTRAP_PACKAGES,
    suite: str = DEFAULT_SUITE,
    log: Log,
) -> None:
    """Import as `tag` a Debian root filesystem holding `packages`, made by debootstrap (root only)."""
    if os.geteuid() != 0:
        raise SandboxError("--bootstrap needs root (debootstrap chroots and makes device nodes); or use --base")
    if shutil.which("debootstrap") is None:
        raise SandboxError("debootstrap not found: install it with `apt-get install debootstrap`")
    mirror = choose_mirror(suite)
    workdir = Path(tempfile.mkdtemp(prefix="refactor-agent-rootfs-", dir="/var/tmp"))
    rootfs = workdir / "rootfs"
    try:
        run_debootstrap(rootfs, mirror, packages, suite=suite, log=log)
        log(f"importing the root filesystem as {tag}")
        import_rootfs(client, rootfs, tag)
    finally:
        remove_rootfs(workdir, log=log)


def import_rootfs(client: docker.DockerClient, rootfs: Path, tag: str) -> None:
    repository, version = parse_repository_tag(tag)
    progress = client.api.import_image_from_stream(
        tar_stream(rootfs),
        repository=repository,
        tag=version,
        changes=["ENV LANG=C.UTF-8", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
    )
    # The daemon reports a failed import inside a successful response, as JSON lines.
    for line in filter(None, str(progress).splitlines()):
        if "error" in (message := json.loads(line)):
            raise SandboxError(f"docker import of {tag} failed: {one_line(message['error'])}")


def run_debootstrap(rootfs: Path, mirror: str, packages: Sequence[str], *, suite: str, log: Log) -> None:
    # minbase: only the essential packages and apt, so `packages` name everything the image needs beyond that.
    include = [f"--include={','.join(packages)}"] if packages else []
    command = ["debootstrap", "--variant=minbase", *include, suite, str(rootfs), mirror]
    log(f"debootstrap {suite} from {mirror} into {rootfs} (takes 3 to 9 minutes)")
    started = time.monotonic()
    last_logged = started
    seen_steps: set[str] = set()
    tail: deque[str] = deque(maxlen=20)
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as process:
        try:
            assert process.stdout is not None
            for raw in process.stdout:
                line = raw.strip()
                tail.append(line)
                # Hundreds of "I: Retrieving x" lines: log the first line of each step, then a heartbeat.
                step = " ".join(line.split()[:2])
                now = time.monotonic()
                if step not in seen_steps or now - last_logged >= PROGRESS_EVERY_S:
                    seen_steps.add(step)
                    last_logged = now
                    log(f"  [{now - started:4.0f}s] {line}")
            exit_code = process.wait()
        finally:
            if process.poll() is None:
                process.kill()
    if exit_code != 0:
        for line in tail:
            log(f"  {line}")
        raise SandboxError(f"debootstrap failed with exit code {exit_code}: {tail[-1] if tail else 'no output'}")
    trim_rootfs(rootfs)
    log(f"debootstrap done in {time.monotonic() - started:.0f}s")


def trim_rootfs(rootfs: Path) -> None:
    """Drop the downloaded .debs and package lists: the image never runs apt without a network anyway."""
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (rootfs / cache).glob("*"):
            if entry.is_file():
                entry.unlink()


def tar_stream(rootfs: Path, chunk_bytes: int = 1 << 20) -> Iterator[bytes]:
    with subprocess.Popen(["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE) as process:
        assert process.stdout is not None
        while chunk := process.stdout.read(chunk_bytes):
            yield chunk
        if process.wait() != 0:
            raise SandboxError(f"tar of {rootfs} failed with exit code {process.returncode}")


def mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()) + "/"
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts]
    return sorted((point for point in points if point.startswith(prefix)), key=len, reverse=True)


def remove_rootfs(workdir: Path, *, log: Log) -> None:
    # debootstrap mounts /proc and /sys inside the target; an interrupted run can leave them mounted,
    # and deleting through a mount would delete the host's files.
    for point in mounts_under(workdir):
        subprocess.run(["umount", "-l", point], check=False)
    if leftover := mounts_under(workdir):
        log(f"left {workdir} in place: still mounted at {', '.join(leftover)}")
        return
    shutil.rmtree(workdir, ignore_errors=True)
