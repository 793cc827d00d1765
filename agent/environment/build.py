"""Building an environment image: the base (an image, or a devcontainer's Dockerfile), then the plan's steps
run in a build container, committed as `refactor-agent-env:<repository>-<digest12>`.

The build container has no network (`network_mode=none`). When the plan's indexes are remote, its commands reach
them through the egress proxy (egress.py), which lets through the index hosts and nothing else; local indexes and
wheelhouses are mounted read-only. Index URLs, proxies and the CA bundle reach the steps as exec variables and
files mounted for the build only, so none of them is kept in the image.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, BinaryIO

import docker
import docker.errors

from agent.environment.egress import FORWARDER, FORWARDER_PORT, EgressProxy
from agent.environment.indexes import CA_IN_BUILD, UV_CONFIG_IN_BUILD
from agent.environment.plan import DEPS_DIR, ENV_REPOSITORY, TOOLS_DIR, EnvironmentPlan, SetupStep, image_tag
from sandbox.container import LABEL, OWNER_LABEL, WORKSPACE
from sandbox.errors import SandboxError, one_line
from sandbox.models import SandboxLimits
from sandbox.owner import current_owner

# Labels of environment images: which repository, which digest.
ENV_LABEL = "refactor-agent.env"
DIGEST_LABEL = "refactor-agent.env.digest"
STEP_TIMEOUT_S = 1800
LOG_TAIL_LINES = 20
PROGRESS_EVERY_S = 15.0
# What the build container may do as root: install files and let apt drop to its own user; nothing more.
BUILD_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL"]
BUILD_VARIABLES = {
    "UV_CACHE_DIR": "/tmp/uv-cache",
    "UV_TOOL_DIR": "/tmp/uv-tools",
    "UV_LINK_MODE": "copy",
    "UV_PYTHON_DOWNLOADS": "never",
    "XDG_CACHE_HOME": "/tmp/cache",
}

Log = Callable[[str], None]


class EnvironmentBuildError(Exception):
    """A build that failed: the step, the tail of its output, and where the whole log is."""

    def __init__(self, step: str, reason: str, tail: list[str], log_path: Path) -> None:
        self.step = step
        self.reason = reason
        self.tail = tail
        self.log_path = log_path
        super().__init__(f"environment build failed at step '{step}': {reason}")


def uv_binary() -> Path:
    from uv import find_uv_bin  # the wheel's static binary, copied into every Python build

    return Path(find_uv_bin())


def uv_version() -> str:
    try:
        return version("uv")
    except PackageNotFoundError:
        return "unknown"


@dataclass
class BuildLog:
    """The build's whole output in a file; a line now and then for the person watching; the tail for errors."""

    path: Path
    progress: Log
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_TAIL_LINES))
    _file: BinaryIO | None = None
    _partial: str = ""
    _last_progress: float = 0.0

    def __enter__(self) -> BuildLog:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("wb")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()

    def note(self, message: str) -> None:
        """A line of ours: in the log and shown."""
        self._last_progress = time.monotonic()
        self.write(f"==> {message}\n".encode())
        self.progress(message)

    def write(self, chunk: bytes) -> None:
        assert self._file is not None
        self._file.write(chunk)
        self._file.flush()
        lines = (self._partial + chunk.decode("utf-8", errors="replace")).split("\n")
        self._partial = lines.pop()
        for line in lines:
            if line.strip():
                self.tail.append(line.rstrip()[:500])
        now = time.monotonic()
        if self.tail and now - self._last_progress >= PROGRESS_EVERY_S:
            self._last_progress = now
            self.progress(f"  {self.tail[-1][:160]}")

    def fail(self, step: str, reason: str) -> EnvironmentBuildError:
        if self._partial.strip():
            self.tail.append(self._partial.rstrip()[:500])
        self.write(f"==> FAILED at step '{step}': {reason}\n".encode())
        return EnvironmentBuildError(step, reason, list(self.tail)[:-1], self.path)


def _tar(files: dict[str, bytes], root: str) -> bytes:
    """The dependency files under `root`, directories included; names come from git's tree, never `..`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        directories = {root.strip("/")}
        for path in files:
            parts = f"{root.strip('/')}/{path}".split("/")
            directories.update("/".join(parts[:end]) for end in range(1, len(parts)))
        for directory in sorted(directories):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            archive.addfile(info)
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(f"{root.strip('/')}/{path}")
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _image_env(image: Any) -> dict[str, str]:
    pairs = (entry.partition("=") for entry in image.attrs.get("Config", {}).get("Env") or [])
    return {name: value for name, _, value in pairs}


def kept_environment(plan: EnvironmentPlan, base_env: dict[str, str]) -> dict[str, str]:
    """The image's variables: the base's, the plan's, and PATH with the plan's directories first."""
    path = base_env.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    return {**base_env, **plan.env, "PATH": ":".join([*plan.path_prepend, path])}


class EnvironmentBuilder:
    def __init__(self, client: docker.DockerClient, plan: EnvironmentPlan, *, repository: str) -> None:
        self.client = client
        self.plan = plan
        self.repository = repository
        self.log: BuildLog

    def base_reference(self) -> tuple[str, str]:
        """(image to start from, the id that goes into the digest); a Dockerfile base is built later, on need."""
        if self.plan.dockerfile is not None:
            return "", "dockerfile"
        assert self.plan.base_image is not None
        try:
            return self.plan.base_image, self.client.images.get(self.plan.base_image).id
        except docker.errors.ImageNotFound:
            raise SandboxError(
                f"base image {self.plan.base_image} is not on this machine (no registry is used): build or load it"
            ) from None

    def tag(self) -> str:
        _, base_id = self.base_reference()
        return image_tag(self.repository, self.plan.digest(base_id, uv_version()))

    def allowed_hosts(self) -> set[str]:
        return self.plan.index.allowed_hosts() | {host.lower() for host in self.plan.hosts}

    def build(self, tag: str, snapshot: Path, log: BuildLog) -> None:
        self.log = log
        base, _ = self.base_reference()
        offline = self.plan.index.offline and not self.plan.hosts
        self.log.note(f"building {tag} ({self.plan.description}); packages from {self.plan.index.describe()}")
        allowed = sorted(self.allowed_hosts())
        self.log.note("build network: none" if offline else f"build network: only {', '.join(allowed)}")
        if self.plan.dockerfile is not None:
            # The classic builder cannot mount the proxy's socket: a Dockerfile's own RUN steps share the host's
            # network (none at all when every index is local).
            base = self._build_dockerfile(f"{tag}-base", "none" if offline else "host", snapshot)
        with tempfile.TemporaryDirectory(prefix="refactor-agent-env-tools-") as tools_dir:
            tools = Path(tools_dir)
            shutil.copy2(uv_binary(), tools / "uv")
            (tools / Path(UV_CONFIG_IN_BUILD).name).write_text(self.plan.index.uv_config(), encoding="utf-8")
            (tools / "forward.py").write_text(FORWARDER, encoding="utf-8")
            if self.plan.index.ca_bundle is not None:
                shutil.copy2(self.plan.index.ca_bundle, tools / Path(CA_IN_BUILD).name)
            upstream, no_proxy = self.plan.index.upstream_proxy()
            container = self._container(base, tools, snapshot)
            try:
                with EgressProxy(tools / "egress.sock", set(allowed), upstream, no_proxy) as proxy:
                    proxy_url = None if offline else self._start_forwarder(container)
                    self._run_steps(container, proxy_url, proxy)
                self._commit(container, base, tag)
            finally:
                container.remove(force=True)

    def _start_forwarder(self, container: Any) -> str:
        """The forwarder inside the container, and the proxy URL the steps use to reach it."""
        api = self.client.api
        command = ["python3", f"{TOOLS_DIR}/forward.py", f"{TOOLS_DIR}/egress.sock", str(FORWARDER_PORT)]
        api.exec_start(api.exec_create(container.id, command, user="0:0")["Id"], detach=True)
        probe = (
            "import socket, time\nfor _ in range(50):\n    try:\n"
            f"        socket.create_connection(('127.0.0.1', {FORWARDER_PORT}), 1).close(); break\n"
            "    except OSError: time.sleep(0.1)\nelse: raise SystemExit(1)\n"
        )
        exit_code, _ = container.exec_run(["python3", "-c", probe], user="0:0")
        if exit_code != 0:
            raise self.log.fail(
                "network", "the build reaches the indexes through a forwarder that needs python3 in the base image"
            )
        return f"http://127.0.0.1:{FORWARDER_PORT}"

    def _build_dockerfile(self, tag: str, network: str, snapshot: Path) -> str:
        dockerfile = self.plan.dockerfile
        assert dockerfile is not None
        step = f"docker build of {dockerfile.dockerfile} in {dockerfile.context or '.'}"
        self.log.note(step)
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as archive:
            archive.add(snapshot / dockerfile.context, arcname=".")
        try:
            stream = self.client.api.build(
                fileobj=io.BytesIO(context.getvalue()),
                custom_context=True,
                dockerfile=dockerfile.dockerfile,
                tag=tag,
                buildargs=dockerfile.args or None,
                network_mode=network,
                rm=True,
                forcerm=True,
                decode=True,
            )
            for chunk in stream:
                if "error" in chunk:
                    raise self.log.fail(step, one_line(chunk["error"]))
                self.log.write(str(chunk.get("stream", "")).encode())
        except docker.errors.DockerException as error:
            raise self.log.fail(step, one_line(error)) from error
        return tag

    def _container(self, base: str, tools: Path, snapshot: Path) -> Any:
        limits = SandboxLimits()
        volumes = {str(tools): {"bind": TOOLS_DIR, "mode": "ro"}}
        volumes |= {host: {"bind": inside, "mode": "ro"} for host, inside in self.plan.index.mounts.items()}
        if self.plan.needs_snapshot:
            volumes[str(snapshot)] = {"bind": WORKSPACE, "mode": "rw"}
        container = self.client.containers.create(
            base,
            command=["sleep", "infinity"],
            labels={LABEL: f"env-build-{self.repository}", OWNER_LABEL: current_owner()},
            volumes=volumes,
            user="0:0",
            network_mode="none",
            cap_drop=["ALL"],
            cap_add=BUILD_CAPABILITIES,
            security_opt=["no-new-privileges"],
            pids_limit=limits.pids,
            mem_limit=limits.memory,
            tmpfs={"/tmp": "rw,nosuid,nodev,mode=1777"},
            init=True,
        )
        try:
            container.start()
            container.put_archive("/", _tar(self.plan.files, DEPS_DIR))
        except BaseException:
            container.remove(force=True)
            raise
        return container

    def _step_environment(self, base_env: dict[str, str], proxy_url: str | None) -> dict[str, str]:
        kept = kept_environment(self.plan, base_env)
        index = self.plan.index.build_environment(proxy_url)
        return {**kept, **BUILD_VARIABLES, **index, "PATH": f"{TOOLS_DIR}:{kept['PATH']}"}

    def _run_steps(self, container: Any, proxy_url: str | None, proxy: EgressProxy) -> None:
        environment = self._step_environment(_image_env(container.image), proxy_url)
        for number, step in enumerate(self.plan.steps, 1):
            self.log.note(f"step {number}/{len(self.plan.steps)}: {step.name}")
            self.log.write(f"$ {step.command}\n".encode())
            denied_before = len(proxy.denied)
            exit_code = self._run(container, step, environment)
            if exit_code != 0:
                reason = f"exit code {exit_code}: {self.log.tail[-1] if self.log.tail else ''}"
                denied = sorted(set(proxy.denied[denied_before:]))
                if denied:
                    allowed = ", ".join(sorted(proxy.allowed_hosts)) or "none"
                    reason = (
                        f"it tried to reach {', '.join(denied)}, which the build may not (allowed: {allowed}); {reason}"
                    )
                raise self.log.fail(step.name, reason)

    def _run(self, container: Any, step: SetupStep, environment: dict[str, str]) -> int | None:
        # `timeout` bounds a step where the base has it; a devcontainer base might not.
        wrapper = (
            f'if command -v timeout >/dev/null; then exec timeout -k 5 {STEP_TIMEOUT_S} sh -c "$1"; '
            'else exec sh -c "$1"; fi'
        )
        api = self.client.api
        exec_id = api.exec_create(
            container.id,
            ["sh", "-c", wrapper + " 2>&1", "_", step.command],
            workdir=step.workdir,
            environment=environment,
            user="0:0",
        )["Id"]
        for chunk in api.exec_start(exec_id, stream=True):
            self.log.write(chunk)
        return api.exec_inspect(exec_id).get("ExitCode")

    def _commit(self, container: Any, base: str, tag: str) -> None:
        base_env = _image_env(self.client.images.get(base))
        kept = kept_environment(self.plan, base_env)
        repository, _, version_tag = tag.partition(":")
        # Docker merges the container's labels into the image: the build container's own are emptied.
        labels = {ENV_LABEL: self.repository, DIGEST_LABEL: version_tag, LABEL: "", OWNER_LABEL: ""}
        container.commit(
            repository=repository,
            tag=version_tag,
            conf={
                "Env": [f"{name}={value}" for name, value in kept.items()],
                "Labels": labels,
                "WorkingDir": WORKSPACE,
            },
        )
        self.log.note(f"committed {tag}")


def environment_images(client: docker.DockerClient) -> list[Any]:
    return client.images.list(name=ENV_REPOSITORY, filters={"label": ENV_LABEL})
