"""One Docker container per task: commands run in it with the workspace mounted, and no network."""

import contextlib
import logging
import re
import secrets
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import docker
import docker.errors
from docker.types import Mount
from docker.utils.socket import frames_iter

from sandbox.daemon import docker_client, require_image
from sandbox.disk import DiskWatch
from sandbox.errors import SandboxError, SandboxLost, one_line
from sandbox.models import CONTAINER_GONE, PROCESS_LIMIT_HIT, ExecResult, SandboxLimits
from sandbox.output import OutputCapture
from sandbox.owner import current_owner, owner_is_gone
from sandbox.pids import ProcessTable

LABEL = "refactor-agent.sandbox"
OWNER_LABEL = "refactor-agent.owner"
WORKSPACE = "/workspace"
# Where each command's wrapper notes the pid of GNU timeout, which leads the command's process group.
PID_FILE = "/tmp/.refactor-agent-command.pid"
KILL_AFTER_S = 2
# GNU timeout gets the timeout with millisecond precision, and reads 0 as "no timeout".
MIN_TIMEOUT_S = 0.001
# The host-side deadline is a backstop behind GNU timeout, which should always act first.
BACKSTOP_GRACE_S = 10
# After a kill, how long the output stream may take to end before the reader is abandoned.
STREAM_END_GRACE_S = 10
# Past this much output the command is killed: it is flooding, and keeping on reading only burns time.
FLOOD_CEILING_BYTES = 64 * 1024 * 1024
SIGKILL_EXIT_CODE = 137
TIMEOUT_EXIT_CODES = (124, SIGKILL_EXIT_CODE)
# GNU timeout's own failure: it could not start the command (a full process table: "fork system call failed").
TIMEOUT_COULD_NOT_START = 125
# How long a command killed from outside may wait for the daemon to say its container is gone.
VANISH_SETTLE_S = 3.0
# How often a running command's stream, the host disk and the container's process count are looked at.
POLL_S = 0.2
PIDS_CHECK_EVERY_S = 1.0

log = logging.getLogger(__name__)


def _container_name(run_id: str) -> str:
    safe_run_id = re.sub(r"[^a-zA-Z0-9_.-]", "-", run_id)[:60]
    return f"refactor-agent-{safe_run_id}-{secrets.token_hex(3)}"


def os_socket(exec_socket: Any) -> socket.socket:
    """docker-py hands out a SocketIO wrapping the OS socket over a unix socket, the socket itself otherwise."""
    return getattr(exec_socket, "_sock", exec_socket)


class _CommandStream:
    """Reads one exec's output on a thread so the caller can keep its own deadline."""

    def __init__(self, exec_socket: Any, capture: OutputCapture, stdin: bytes | None = None) -> None:
        self.capture = capture
        self.flooded = threading.Event()
        self._socket = exec_socket
        # The client's request timeout would otherwise end the stream of any command silent for that long.
        os_socket(exec_socket).settimeout(None)
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        if stdin is not None:
            # Its own thread: a command that prints before it reads its input must not wait on our writing.
            threading.Thread(target=self._write, args=(stdin,), daemon=True).start()

    def _write(self, data: bytes) -> None:
        raw = os_socket(self._socket)
        try:
            raw.sendall(data)
            # Half-closing the hijacked connection is how the daemon learns to close the command's stdin (EOF).
            raw.shutdown(socket.SHUT_WR)
        except OSError as error:  # the command ended (or was killed) before it read everything
            log.debug("exec stdin ended with %s", error)

    def _read(self) -> None:
        try:
            for _, chunk in frames_iter(self._socket, tty=False):
                with self._lock:
                    self.capture.add(chunk)
                    if self.capture.total_bytes > FLOOD_CEILING_BYTES:
                        self.flooded.set()
        except OSError as error:  # the stream cut by `abandon` or by the daemon ends the output, nothing more
            log.debug("exec stream ended with %s", error)
        finally:
            raw = os_socket(self._socket)
            self._socket.close()
            raw.close()

    def wait(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def abandon(self) -> None:
        """Cut the stream: output that a stray process still writes is not worth waiting for."""
        with contextlib.suppress(OSError, AttributeError):  # the reader may have closed it already
            os_socket(self._socket).shutdown(socket.SHUT_RDWR)
        self._thread.join(STREAM_END_GRACE_S)

    def render(self) -> tuple[str, int, bool]:
        with self._lock:
            return self.capture.render(), self.capture.total_bytes, self.capture.truncated


class DockerSandbox:
    """A long-lived idle container for one task; `execute` runs each command in it."""

    def __init__(
        self,
        image: str,
        workspace: Path,
        *,
        run_id: str,
        limits: SandboxLimits | None = None,
        client: docker.DockerClient | None = None,
        read_only_paths: Sequence[Path] = (),
    ) -> None:
        self.image = image
        self.workspace = Path(workspace).resolve()
        # Mounted at their own absolute paths: a git worktree's `.git` file points at the repository's git
        # directory by absolute path, and read-only lets `git diff`/`git log` work without any write to it.
        self.read_only_paths = [Path(path).resolve() for path in read_only_paths]
        self.run_id = run_id
        self.limits = limits or SandboxLimits()
        self._client = client
        self._container: Any = None
        self._exec_lock = threading.Lock()
        self._disk: DiskWatch | None = None
        self._processes: ProcessTable | None = None

    @property
    def container_id(self) -> str | None:
        return self._container.id if self._container is not None else None

    def start(self) -> None:
        if self._container is not None:
            return
        if not self.workspace.is_dir():
            raise SandboxError(f"workspace {self.workspace} is not a directory")
        client = self._client = self._client or docker_client()
        require_image(client, self.image)
        owner = self.workspace.stat()
        if self._disk is None:  # a recycled container keeps the first baseline: growth counts from the task's start
            self._disk = DiskWatch(
                self.workspace,
                growth_cap_bytes=self.limits.workspace_growth_bytes,
                free_floor_bytes=self.limits.disk_free_floor_bytes,
            )
        # No more CPUs than the daemon has: Docker refuses the container otherwise.
        cpus = min(self.limits.cpus, float(client.info().get("NCPU") or self.limits.cpus))
        try:
            self._container = client.containers.create(
                self.image,
                command=["sleep", "infinity"],
                name=_container_name(self.run_id),
                labels={LABEL: self.run_id, OWNER_LABEL: current_owner()},
                # Mount objects, not `volumes` strings: those split on `:`, so a path holding one could not mount.
                mounts=[
                    Mount(WORKSPACE, str(self.workspace), type="bind"),
                    *(Mount(str(path), str(path), type="bind", read_only=True) for path in self.read_only_paths),
                ],
                working_dir=WORKSPACE,
                user=f"{owner.st_uid}:{owner.st_gid}",
                # GIT_OPTIONAL_LOCKS=0: `git status` would otherwise try to refresh the read-only index.
                environment={"HOME": "/tmp", "GIT_OPTIONAL_LOCKS": "0", "PYTHONDONTWRITEBYTECODE": "1"},
                network_mode="none",
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                pids_limit=self.limits.pids,
                mem_limit=self.limits.memory,
                memswap_limit=self.limits.memory,
                nano_cpus=int(cpus * 1e9),
                # exec said outright: Docker mounts a tmpfs noexec unless told, and suites run programs they write
                # to tmp_path (click's fake pagers: PermissionError). The workspace is executable anyway.
                tmpfs={"/tmp": f"rw,exec,nosuid,nodev,size={self.limits.tmp_size},mode=1777"},
                init=True,
            )
            self._container.start()
            self._processes = ProcessTable(client, self._container)
        except docker.errors.APIError as error:
            self.close()
            raise SandboxError(f"cannot start a sandbox container from {self.image}: {one_line(error)}") from error
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "DockerSandbox":
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def execute(
        self,
        command: str,
        *,
        timeout_s: float | None = None,
        max_output_bytes: int = 256_000,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run `command` with bash in /workspace; `stdin`, when given, is its whole input (then EOF), else none."""
        if self._container is None or self._client is None:
            raise SandboxError("the sandbox is not started")
        timeout = timeout_s if timeout_s is not None else self.limits.command_timeout_s
        if timeout < MIN_TIMEOUT_S:
            raise SandboxError(f"command timeout must be at least {MIN_TIMEOUT_S}s, got {timeout}s")
        with self._exec_lock:
            return self._execute(command, timeout, max_output_bytes, stdin)

    def _execute(
        self, command: str, timeout: float, max_output_bytes: int, stdin: bytes | None, *, first_try: bool = True
    ) -> ExecResult:
        # A table filled after the last command ended (a bomb in the background) would fail this one too.
        restarted_before = self._recycle_if_full()
        self._disk.command_started()
        started = time.monotonic()
        try:
            exec_id, exec_socket = self._start_exec(command, timeout, stdin)
        except docker.errors.APIError as error:
            if not self._gone():
                raise SandboxError(f"cannot run a command in {self._container.name}: {one_line(error)}") from error
            restarted_before = self._replace(CONTAINER_GONE)
            try:
                exec_id, exec_socket = self._start_exec(command, timeout, stdin)
            except docker.errors.APIError as again:
                raise SandboxError(f"cannot run a command in {self._container.name}: {one_line(again)}") from again
        stream = _CommandStream(exec_socket, OutputCapture(max_output_bytes), stdin)
        deadline = started + timeout + KILL_AFTER_S + BACKSTOP_GRACE_S
        killed_at: float | None = None
        disk_full: str | None = None
        restarted_during = None
        next_pids_check = started + PIDS_CHECK_EVERY_S
        while not stream.wait(POLL_S):
            now = time.monotonic()
            if killed_at is None:
                disk_full = self._disk.breach()
                if disk_full or stream.flooded.is_set() or now > deadline:
                    self._kill_command_group()
                    killed_at = now
            elif now - killed_at > STREAM_END_GRACE_S:
                stream.abandon()
                break
            # A full process table defeats the kill above too (it needs a process of its own): only a new
            # container helps, and it ends the command's stream along with the old one.
            if now >= next_pids_check:
                next_pids_check = now + PIDS_CHECK_EVERY_S
                restarted_during = self._recycle_if_full()
                if restarted_during:
                    # The daemon ends the stream with the old container; cut it only if it does not.
                    if not stream.wait(STREAM_END_GRACE_S):
                        stream.abandon()
                    break
        duration = time.monotonic() - started
        output, total_bytes, truncated = stream.render()
        # A container removed (or stopped) from outside ends the command's stream: the task goes on in a new one.
        if restarted_during is None and self._vanished(exec_id, settle=killed_at is None):
            restarted_during = self._replace(CONTAINER_GONE)
        exit_code = None if restarted_during else self._exit_code(exec_id)
        flooded = stream.flooded.is_set()
        timed_out = (killed_at is not None and not (flooded or disk_full)) or (
            exit_code in TIMEOUT_EXIT_CODES and duration >= timeout
        )
        # A command can end on its own and still leave processes that fill the table, or fill the disk
        # between two looks.
        restarted_after = None if restarted_during else self._recycle_if_full()
        if restarted_after and exit_code == TIMEOUT_COULD_NOT_START and first_try:
            # The bombed table was not seen full before the command, and the command never started: it runs in the
            # fresh container, where it would have run had the table been seen full a moment earlier.
            again = self._execute(command, timeout, max_output_bytes, stdin, first_try=False)
            return again.model_copy(update={"sandbox_restarted": again.sandbox_restarted or restarted_after})
        return ExecResult(
            exit_code=None if timed_out or killed_at is not None else exit_code,
            output=output,
            total_bytes=total_bytes,
            truncated=truncated or flooded,
            timed_out=timed_out,
            duration_s=duration,
            disk_full=disk_full or self._disk.breach(),
            sandbox_restarted=restarted_before or restarted_during or restarted_after,
        )

    def _start_exec(self, command: str, timeout: float, stdin: bytes | None) -> tuple[str, Any]:
        api = self._client.api
        # GNU timeout leads a process group of its own, so killing that group from outside takes the
        # whole command tree and leaves the container's idle process alone. One pipe for stdout and
        # stderr keeps their lines in the order they were written.
        wrapper = f'echo $$ > {PID_FILE}; exec timeout -k {KILL_AFTER_S} {timeout:.3f} bash -c "$1" 2>&1'
        exec_id = api.exec_create(
            self._container.id, ["sh", "-c", wrapper, "_", command], stdin=stdin is not None, workdir=WORKSPACE
        )["Id"]
        return exec_id, api.exec_start(exec_id, socket=True)

    def _recycle_if_full(self) -> str | None:
        """Replace a container whose process table is full by a fresh one with the same mounts: the workspace's
        files stay, nothing else does. The reason when it was replaced."""
        if not self._processes.full():
            return None
        return self._replace(PROCESS_LIMIT_HIT)

    def _gone(self) -> bool:
        """Whether the container was removed or stopped from outside (by hand, a daemon restart, another tool)."""
        try:
            self._container.reload()
        except docker.errors.NotFound:
            return True
        except docker.errors.APIError:  # the daemon is there but cannot say: the command's own error stands
            return False
        return self._container.status != "running"

    def _vanished(self, exec_id: str, *, settle: bool) -> bool:
        """Whether the command ended because its container went. Removing a container kills its processes first,
        and the daemon may still call it running a moment after the command died of that SIGKILL: a command
        killed so (and not by us: `settle`) is given that moment."""
        try:
            killed = self._client.api.exec_inspect(exec_id).get("ExitCode") == SIGKILL_EXIT_CODE
        except docker.errors.NotFound:  # the exec went with its container
            return True
        deadline = time.monotonic() + (VANISH_SETTLE_S if killed and settle else 0)
        while not self._gone():
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)
        return True

    def _replace(self, reason: str) -> str:
        """A fresh container for the same workspace; SandboxLost, naming the sandbox, when none can be started."""
        name = self._container.name
        log.warning("sandbox %s: %s; replacing it", name, reason)
        self.close()
        try:
            self.start()
        except SandboxError as error:
            raise SandboxLost(f"sandbox {name}: {reason}, and a new one could not be started: {error}") from error
        return reason

    def _exit_code(self, exec_id: str) -> int | None:
        state = self._client.api.exec_inspect(exec_id)
        return None if state.get("Running") else state.get("ExitCode")

    def _kill_command_group(self) -> None:
        # bash, not sh: dash's kill builtin takes neither `--` nor a negative pid naming a process group.
        kill = f'pid=$(cat {PID_FILE} 2>/dev/null) && kill -KILL -- "-$pid"'
        try:
            self._container.exec_run(["bash", "-c", kill], workdir=WORKSPACE)
        except docker.errors.APIError as error:
            log.warning("could not kill a command in %s: %s", self._container.name, one_line(error))

    def close(self) -> None:
        """Remove the container; safe to call twice, and never raises: it runs while unwinding errors."""
        container, self._container = self._container, None
        if container is None:
            return
        try:
            # v: the anonymous volumes of the image's VOLUMEs go too, or every task would leave a set behind.
            container.remove(force=True, v=True)
        except docker.errors.NotFound:  # removed from outside already
            return
        except Exception as error:
            log.warning("could not remove sandbox container %s: %s", container.name, one_line(error))


def sweep_leftovers(client: docker.DockerClient, *, older_than_run: str | None = None) -> int:
    """Remove sandbox containers whose owning process has ended (runs that crashed or were killed).

    Containers of run `older_than_run` (the caller's own) are always kept, and so are those whose owner
    still runs or lives on another host. Returns how many were removed.
    """
    removed = 0
    for container in client.containers.list(all=True, filters={"label": LABEL}):
        labels = container.labels
        if older_than_run is not None and labels.get(LABEL) == older_than_run:
            continue
        if not owner_is_gone(labels.get(OWNER_LABEL, "")):
            continue
        try:
            container.remove(force=True, v=True)
            removed += 1
        except docker.errors.NotFound:
            continue
        except docker.errors.APIError as error:  # another run sweeping the same one (409: removal in progress)
            log.warning("could not remove sandbox container %s: %s", container.name, one_line(error))
    return removed


def remove_run_containers(client: docker.DockerClient, run_id: str) -> int:
    """Remove every sandbox container of run `run_id`: the last step of a run that was stopped by a signal,
    which may have landed while a container was being created or removed. Returns how many were removed."""
    removed = 0
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}={run_id}"}):
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True, v=True)
            removed += 1
    return removed
