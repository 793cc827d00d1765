"""Building an environment image: the base (an image, or a devcontainer's Dockerfile), then the plan's steps
run in a build container, committed as `refactor-agent-env:<repository>-<digest12>`.

Nothing of a build reaches the host's network. The build container has no network (`network_mode=none`); when the
plan's indexes are remote, its commands reach them through the egress proxy (egress.py), which lets through the
index hosts on their ports and nothing else; local indexes and wheelhouses are mounted read-only. A Dockerfile is
built by Docker's classic builder (docker-py speaks no BuildKit) with its RUN steps in the network namespace of a
small container that has no network either and runs the same forwarder to the same proxy, found through Docker's
predefined proxy build arguments (never kept in the image); with every index local, RUN steps have no network
at all. Index URLs, proxies and the CA bundle reach the steps as exec variables and files mounted for the build
only, so none of them is kept in the image. Each step, the Dockerfile's build included, is stopped from the host
at its time limit or at the night's deadline, whichever comes first.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import socket
import tarfile
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, BinaryIO

import docker
import docker.errors
import requests
import urllib3.exceptions
from docker.types import Mount
from docker.utils import parse_bytes
from docker.utils.socket import frames_iter

from agent.environment.egress import (
    FORWARDER,
    FORWARDER_PORT,
    EgressProxy,
    Endpoint,
    describe_endpoints,
    host_endpoints,
)
from agent.environment.indexes import CA_IN_BUILD, UV_CONFIG_IN_BUILD
from agent.environment.plan import DEPS_DIR, ENV_REPOSITORY, TOOLS_DIR, EnvironmentPlan, SetupStep, image_tag
from sandbox.container import LABEL, OWNER_LABEL, WORKSPACE, os_socket
from sandbox.daemon import build_api_client
from sandbox.errors import SandboxError, one_line
from sandbox.models import SandboxLimits
from sandbox.owner import current_owner

# Labels of environment images: which repository, which digest.
ENV_LABEL = "refactor-agent.env"
DIGEST_LABEL = "refactor-agent.env.digest"
# Each step's own limit, the Dockerfile's whole build being one step.
STEP_TIMEOUT_S = 1800
# The daemon's stream of a build is silent while a quiet RUN works: only the step's limit may end it.
BUILD_STREAM_TIMEOUT_S = STEP_TIMEOUT_S + 60
LOG_TAIL_LINES = 20
PROGRESS_EVERY_S = 15.0
# What the build container may do as root: install files and let apt drop to its own user; nothing more.
BUILD_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL"]
# Docker's predefined build arguments: RUN steps see them without an ARG, and the image's history does not keep them.
PROXY_BUILD_ARGUMENTS = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
# Transport errors of the daemon's stream, as docker-py lets them through when the stream is cut.
STREAM_ERRORS = (docker.errors.DockerException, requests.RequestException, urllib3.exceptions.HTTPError, OSError)
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
    """The build's whole output in a file; a line now and then for the person watching; the tail for errors.
    The egress proxy writes from its own threads, hence the lock."""

    path: Path
    progress: Log
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_TAIL_LINES))
    _file: BinaryIO | None = None
    _partial: str = ""
    _last_progress: float = 0.0
    _shown: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

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

    def event(self, message: str) -> None:
        """A line of ours that may come again and again (a refused connection): each in the log, shown once."""
        self.write(f"==> {message}\n".encode())
        with self._lock:
            first = message not in self._shown
            self._shown.add(message)
        if first:
            self.progress(message)

    def write(self, chunk: bytes) -> None:
        with self._lock:
            self._write(chunk)

    def _write(self, chunk: bytes) -> None:
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


@dataclass(frozen=True)
class BuildClock:
    """When a build step must stop: its own limit, or the night's deadline (wall clock) when that comes first."""

    deadline: float | None = None  # time.time() of the night's end

    def step_limit(self) -> tuple[float, str]:
        """Seconds the next step may take, and what stops it then."""
        if self.deadline is not None and self.deadline - time.time() < STEP_TIMEOUT_S:
            return max(0.0, self.deadline - time.time()), "the night's deadline"
        return STEP_TIMEOUT_S, f"the step's time limit of {STEP_TIMEOUT_S // 60} min"


@contextlib.contextmanager
def _stopped_after(seconds: float, stop: Callable[[], None]) -> Iterator[threading.Event]:
    """Run `stop` from a timer after `seconds` unless the block ends first; the event says whether it ran."""
    fired = threading.Event()

    def fire() -> None:
        fired.set()
        with contextlib.suppress(*STREAM_ERRORS):  # what it stops may be ending on its own at this moment
            stop()

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield fired
    finally:
        timer.cancel()


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
    def __init__(
        self,
        client: docker.DockerClient,
        plan: EnvironmentPlan,
        *,
        repository: str,
        sandbox_image: str,
        clock: BuildClock | None = None,
    ) -> None:
        self.client = client
        self.plan = plan
        self.repository = repository
        self.sandbox_image = sandbox_image  # runs the forwarder for a Dockerfile's RUN steps: it has python3
        self.clock = clock or BuildClock()
        self.log: BuildLog

    def _image_id(self, image: str) -> str:
        try:
            return self.client.images.get(image).id
        except docker.errors.ImageNotFound:
            raise SandboxError(
                f"base image {image} is not on this machine (no registry is used): build or load it"
            ) from None

    def base_reference(self) -> tuple[str, str]:
        """(image to start from, the ids that go into the digest); a Dockerfile base is built later, on need."""
        if self.plan.dockerfile is not None:
            return "", " ".join(self._image_id(image) for image in self.plan.dockerfile.base_images)
        assert self.plan.base_image is not None
        return self.plan.base_image, self._image_id(self.plan.base_image)

    def tag(self) -> str:
        _, base_id = self.base_reference()
        return image_tag(self.repository, self.plan.digest(base_id, uv_version()))

    def allowed_endpoints(self) -> set[Endpoint]:
        hosts = {endpoint for host in self.plan.hosts for endpoint in host_endpoints(host)}
        return self.plan.index.allowed_endpoints() | hosts

    def build(self, tag: str, snapshot: Path, tools: Path, log: BuildLog) -> None:
        """Build `tag` from the committed tree at `snapshot`; `tools` is an empty directory for the build's own
        files (uv, its settings, the CA bundle, the proxy's socket), mounted read-only."""
        self.log = log
        base, _ = self.base_reference()
        offline = self.plan.index.offline and not self.plan.hosts
        self.log.note(f"building {tag} ({self.plan.description}); packages from {self.plan.index.describe()}")
        allowed = self.allowed_endpoints()
        self.log.note("build network: none" if offline else f"build network: only {describe_endpoints(allowed)}")
        shutil.copy2(uv_binary(), tools / "uv")
        (tools / Path(UV_CONFIG_IN_BUILD).name).write_text(self.plan.index.uv_config(), encoding="utf-8")
        (tools / "forward.py").write_text(FORWARDER, encoding="utf-8")
        if self.plan.index.ca_bundle is not None:
            shutil.copy2(self.plan.index.ca_bundle, tools / Path(CA_IN_BUILD).name)
        upstream, no_proxy = self.plan.index.upstream_proxy()
        with EgressProxy(tools / "egress.sock", allowed, upstream, no_proxy, log=self.log.event) as proxy:
            if self.plan.dockerfile is not None:
                base = self._build_dockerfile(f"{tag}-base", snapshot, tools, offline, proxy)
            try:
                container = self._container(base, tools, snapshot)
                try:
                    proxy_url = None if offline else self._start_forwarder(container)
                    self._run_steps(container, proxy_url, proxy)
                    if self.plan.needs_snapshot:
                        self._exec_root(container, f"find {WORKSPACE} -mindepth 1 -maxdepth 1 -exec rm -rf {{}} +")
                    self._commit(container, base, tag)
                finally:
                    container.remove(force=True, v=True)
            finally:
                if self.plan.dockerfile is not None:
                    # Only the tag goes: the layers stay under the environment image (and in the builder's cache).
                    with contextlib.suppress(docker.errors.APIError):
                        self.client.images.remove(base, noprune=True)

    def _start_forwarder(self, container: Any) -> str:
        """The forwarder inside the container, and the proxy URL the steps use to reach it."""
        api = self.client.api
        command = ["python3", f"{TOOLS_DIR}/forward.py", f"{TOOLS_DIR}/egress.sock", str(FORWARDER_PORT)]
        api.exec_start(api.exec_create(container.id, command, user="0:0")["Id"], detach=True)
        self._await_forwarder(container)
        return f"http://127.0.0.1:{FORWARDER_PORT}"

    def _await_forwarder(self, container: Any) -> None:
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

    def _confined(self, image: str, command: list[str], mounts: list[Mount], capabilities: list[str]) -> Any:
        """A started container for the build: no network, root with `capabilities` only, bounded, labelled so that
        `sandbox sweep` removes it after a kill -9."""
        limits = SandboxLimits()
        container = self.client.containers.create(
            image,
            command=command,
            labels={LABEL: f"env-build-{self.repository}", OWNER_LABEL: current_owner()},
            # Mount objects, not `volumes`: those would be declared as the committed image's VOLUMEs.
            mounts=mounts,
            user="0:0",
            network_mode="none",
            cap_drop=["ALL"],
            cap_add=capabilities,
            security_opt=["no-new-privileges"],
            pids_limit=limits.pids,
            mem_limit=limits.memory,
            tmpfs={"/tmp": "rw,nosuid,nodev,mode=1777"},
            init=True,
        )
        try:
            container.start()
        except BaseException:
            container.remove(force=True, v=True)
            raise
        return container

    def _network_holder(self, tools: Path) -> Any:
        """A container whose network namespace (loopback only) the Dockerfile's RUN steps join: the forwarder in
        it is their one way out, to the egress proxy. It needs no capability at all."""
        command = ["python3", f"{TOOLS_DIR}/forward.py", f"{TOOLS_DIR}/egress.sock", str(FORWARDER_PORT)]
        holder = self._confined(
            self.sandbox_image, command, [Mount(TOOLS_DIR, str(tools), type="bind", read_only=True)], []
        )
        try:
            self._await_forwarder(holder)
        except BaseException:
            holder.remove(force=True, v=True)
            raise
        return holder

    def _build_dockerfile(self, tag: str, snapshot: Path, tools: Path, offline: bool, proxy: EgressProxy) -> str:
        dockerfile = self.plan.dockerfile
        assert dockerfile is not None
        step = f"docker build of {dockerfile.dockerfile} in {dockerfile.context or '.'}"
        self.log.note(step)
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as archive:
            archive.add(snapshot / dockerfile.context, arcname=".")
        holder = None if offline else self._network_holder(tools)
        arguments = dict(dockerfile.args)
        if holder is not None:
            arguments |= dict.fromkeys(PROXY_BUILD_ARGUMENTS, f"http://127.0.0.1:{FORWARDER_PORT}")
        memory = parse_bytes(SandboxLimits().memory)
        # A client of its own: the stream is cut at the step's end, and the daemon then stops the RUN in progress.
        api = build_api_client(BUILD_STREAM_TIMEOUT_S)
        responses: list[Any] = []
        api.hooks["response"].append(lambda response, *_, **__: responses.append(response))
        seconds, why = self.clock.step_limit()
        denied_before = len(proxy.denied)
        try:
            with _stopped_after(seconds, lambda: _cut(responses)) as stopped:
                try:
                    stream = api.build(
                        fileobj=io.BytesIO(context.getvalue()),
                        custom_context=True,
                        dockerfile=dockerfile.dockerfile,
                        tag=tag,
                        buildargs=arguments or None,
                        network_mode="none" if holder is None else f"container:{holder.id}",
                        container_limits={"memory": memory, "memswap": memory},
                        rm=True,
                        forcerm=True,
                        decode=True,
                        use_config_proxy=False,  # the client's own proxy settings would lead nowhere, or elsewhere
                    )
                    for chunk in stream:
                        if "error" in chunk:
                            raise self.log.fail(step, self._with_denied(one_line(chunk["error"]), proxy, denied_before))
                        self.log.write(str(chunk.get("stream", "")).encode())
                except STREAM_ERRORS as error:
                    if stopped.is_set():
                        raise self.log.fail(step, f"stopped after {seconds:.0f}s at {why}") from None
                    raise self.log.fail(step, one_line(error)) from error
        finally:
            api.close()
            if holder is not None:
                holder.remove(force=True, v=True)
        return tag

    def _container(self, base: str, tools: Path, snapshot: Path) -> Any:
        mounts = [Mount(TOOLS_DIR, str(tools), type="bind", read_only=True)]
        mounts += [Mount(inside, host, type="bind", read_only=True) for host, inside in self.plan.index.mounts.items()]
        container = self._confined(base, ["sleep", "infinity"], mounts, BUILD_CAPABILITIES)
        try:
            container.put_archive("/", _tar(self.plan.files, DEPS_DIR))
            if self.plan.needs_snapshot:
                self._copy_tree(container, snapshot)
        except BaseException:
            container.remove(force=True, v=True)
            raise
        return container

    def _copy_tree(self, container: Any, snapshot: Path) -> None:
        """The committed tree at /workspace, copied in (a mount would leave the build's root-owned files on the
        host), then the plan's tree files over it."""
        self._exec_root(container, f"mkdir -p {WORKSPACE}")
        with tempfile.TemporaryFile() as archive_file:
            with tarfile.open(fileobj=archive_file, mode="w") as archive:
                archive.add(snapshot, arcname=".")
            archive_file.seek(0)
            container.put_archive(WORKSPACE, archive_file)
        container.put_archive("/", _tar(self.plan.tree_files, WORKSPACE))

    def _exec_root(self, container: Any, command: str) -> None:
        exit_code, output = container.exec_run(["sh", "-c", command], user="0:0")
        if exit_code != 0:
            raise self.log.fail("the copy of the committed tree", one_line(output.decode(errors="replace")))

    def _step_environment(self, base_env: dict[str, str], proxy_url: str | None) -> dict[str, str]:
        kept = kept_environment(self.plan, base_env)
        index = self.plan.index.build_environment(proxy_url)
        return {**kept, **BUILD_VARIABLES, **index, "PATH": f"{TOOLS_DIR}:{kept['PATH']}"}

    def _with_denied(self, reason: str, proxy: EgressProxy, denied_before: int) -> str:
        """A failure's reason, with what the step tried to reach and could not, if anything."""
        denied = sorted(set(proxy.denied[denied_before:]))
        if not denied:
            return reason
        allowed = describe_endpoints(proxy.allowed)
        return f"it tried to reach {', '.join(denied)}, which the build may not (allowed: {allowed}); {reason}"

    def _run_steps(self, container: Any, proxy_url: str | None, proxy: EgressProxy) -> None:
        environment = self._step_environment(_image_env(container.image), proxy_url)
        for number, step in enumerate(self.plan.steps, 1):
            self.log.note(f"step {number}/{len(self.plan.steps)}: {step.name}")
            self.log.write(f"$ {step.command}\n".encode())
            denied_before = len(proxy.denied)
            seconds, why = self.clock.step_limit()
            with _stopped_after(seconds, container.kill) as stopped:
                exit_code = self._run(container, step, environment)
            if stopped.is_set():
                raise self.log.fail(step.name, f"stopped after {seconds:.0f}s at {why}")
            if exit_code != 0:
                reason = f"exit code {exit_code}: {self.log.tail[-1] if self.log.tail else ''}"
                raise self.log.fail(step.name, self._with_denied(reason, proxy, denied_before))

    def _run(self, container: Any, step: SetupStep, environment: dict[str, str]) -> int | None:
        """The step's exit code; its output streamed to the log. The clock stops it from the host by killing
        the container: a base image need not have `timeout`, and a step may be silent for minutes."""
        api = self.client.api
        exec_id = api.exec_create(
            container.id,
            ["sh", "-c", 'exec sh -c "$1" 2>&1', "_", step.command],
            workdir=step.workdir,
            environment=environment,
            user="0:0",
        )["Id"]
        stream = api.exec_start(exec_id, socket=True)
        os_socket(stream).settimeout(None)  # the client's request timeout would end a step silent for that long
        try:
            for _, chunk in frames_iter(stream, tty=False):
                self.log.write(chunk)
        except OSError:
            pass  # the container was killed under the stream
        finally:
            stream.close()
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


def _cut(responses: list[Any]) -> None:
    """End the daemon's build stream from our side: the daemon then stops and removes the running step."""
    for response in responses:
        connection = getattr(response.raw, "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)


def environment_images(client: docker.DockerClient) -> list[Any]:
    return client.images.list(name=ENV_REPOSITORY, filters={"label": ENV_LABEL})


def prune_images(
    client: docker.DockerClient, keep: int, *, repositories: set[str] | None = None, dry_run: bool = False
) -> tuple[list[str], dict[str, str]]:
    """Remove the environment images beyond the newest `keep` of each repository (0: all of them), of `repositories`
    only when given (by name, as ENV_LABEL holds it); the tags removed, and those kept with why (Docker refuses to
    remove one a container uses)."""
    images = sorted(environment_images(client), key=lambda image: image.attrs.get("Created", ""), reverse=True)
    seen: dict[str, int] = {}
    removed: list[str] = []
    kept: dict[str, str] = {}
    for image in images:
        repository = image.labels.get(ENV_LABEL, "")
        seen[repository] = seen.get(repository, 0) + 1
        if seen[repository] <= keep or (repositories is not None and repository not in repositories):
            continue
        for tag in image.tags:
            try:
                if not dry_run:
                    client.images.remove(tag)
                removed.append(tag)
            except docker.errors.APIError as error:
                kept[tag] = " ".join(str(error).split())
    return removed, kept
