"""Starting, stopping and listing llama-server processes; each start leaves a state file (pid, command, log)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx
from pydantic import BaseModel

from agent.safety.private_dirs import private_dir
from agent.server.api import LlamaServerAPI, ServerLoading, ServerUnreachable
from agent.server.binary import help_text, supported_flags
from agent.server.errors import LaunchError
from agent.server.paths import default_state_dir
from agent.server.presets import DEFAULT_READY_TIMEOUT_S, ServerPreset

Log = Callable[[str], None]

STOP_TIMEOUT_S = 30.0
POLL_S = 0.25
PROGRESS_EVERY_S = 30.0
LOG_TAIL_LINES = 5

# Children of this process, so stop_server can reap them instead of leaving zombies behind.
_children: dict[int, subprocess.Popen[bytes]] = {}


class ServerState(BaseModel):
    pid: int
    preset: str
    url: str
    port: int
    binary: Path
    command: list[str]
    log_file: Path
    started_at: datetime
    drafting: bool
    slot_save_path: Path | None = None  # where the server saves slots (None: state files from older versions)


class ServerStatus(BaseModel):
    state: ServerState
    running: bool
    health: str


def _state_file(state_dir: Path, port: int) -> Path:
    return state_dir / f"server-{port}.json"


def read_states(state_dir: Path | None = None) -> list[ServerState]:
    directory = state_dir or default_state_dir()
    return [ServerState.model_validate_json(path.read_text()) for path in sorted(directory.glob("server-*.json"))]


def find_state(port: int, state_dir: Path | None = None) -> ServerState | None:
    path = _state_file(state_dir or default_state_dir(), port)
    return ServerState.model_validate_json(path.read_text()) if path.is_file() else None


def check_flags(preset: ServerPreset, binary: Path) -> None:
    """A build without one of the preset's flags would exit with a usage error long after the user left."""
    known = supported_flags(binary)
    missing = [argument for argument in preset.arguments() if argument.startswith("--") and argument not in known]
    if missing:
        raise LaunchError(f"{binary} does not know {', '.join(missing)}: it is older than this product needs")
    if preset.spec_type is not None and preset.spec_type not in help_text(binary):
        raise LaunchError(f"{binary} does not support --spec-type {preset.spec_type}: rebuild a newer llama.cpp")


def _log_tail(log_file: Path) -> str:
    lines = [line.strip() for line in log_file.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return " | ".join((errors or lines)[-LOG_TAIL_LINES:]) or "no output"


def start_server(
    preset: ServerPreset,
    *,
    binary: Path,
    state_dir: Path | None = None,
    log: Log = print,
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
) -> ServerState:
    """Launch llama-server detached from this process, record it, and return once /health is ok."""
    check_flags(preset, binary)
    with LlamaServerAPI(preset.url, timeout_s=2.0) as api:
        if _answers(api):
            raise LaunchError(f"port {preset.port} is taken: a server already answers at {api.root}")
    directory = state_dir or default_state_dir()
    private_dir(directory)
    if preset.slot_save_path is not None:  # saved prefixes are the repositories' text in another form
        private_dir(preset.slot_save_path)
    log_file = directory / f"server-{preset.port}.log"
    command = preset.command(binary)
    log(f"starting llama-server (preset {preset.name}): {shlex.join(command)}")
    with log_file.open("wb") as output:
        # A session of its own: Ctrl-C in the terminal that started it must not take the server down.
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    _children[process.pid] = process
    state = ServerState(
        pid=process.pid,
        preset=preset.name,
        url=preset.url,
        port=preset.port,
        binary=binary,
        command=command,
        log_file=log_file,
        started_at=datetime.now(UTC),
        drafting=preset.drafting,
        slot_save_path=preset.slot_save_path,
    )
    _state_file(directory, preset.port).write_text(state.model_dump_json(indent=2))
    try:
        _wait_until_ready(state, ready_timeout_s, log)
    except BaseException:
        _terminate(state.pid)
        _state_file(directory, preset.port).unlink(missing_ok=True)
        raise
    log(f"llama-server ready at {preset.url} (pid {state.pid}, log {log_file})")
    return state


def _answers(api: LlamaServerAPI) -> bool:
    """Anything listening on the port, loading or not, llama-server or not."""
    try:
        api.health()
    except ServerUnreachable:
        return False
    except (ServerLoading, httpx.HTTPStatusError):
        pass
    return True


def _wait_until_ready(state: ServerState, timeout_s: float, log: Log) -> None:
    started = time.monotonic()
    last_progress = started
    with LlamaServerAPI(state.url, timeout_s=5.0) as api:
        while True:
            exit_code = _exit_code(state.pid)
            if exit_code == -signal.SIGILL:
                raise LaunchError(
                    "llama-server died of an illegal instruction: this CPU advertises instructions it cannot run "
                    f"(often AMX in a VM); pass `-- --no-repack` or rebuild llama.cpp here (log: {state.log_file})"
                )
            if exit_code is not None:
                raise LaunchError(
                    f"llama-server exited ({exit_code}) while starting: {_log_tail(state.log_file)} "
                    f"(full log: {state.log_file})"
                )
            try:
                api.health()
                return
            except (ServerLoading, ServerUnreachable):
                pass
            now = time.monotonic()
            if now - started > timeout_s:
                raise LaunchError(f"llama-server not ready after {timeout_s:.0f}s (log: {state.log_file})")
            if now - last_progress >= PROGRESS_EVERY_S:
                last_progress = now
                log(f"  still loading after {now - started:.0f}s ...")
            time.sleep(POLL_S)


def _exit_code(pid: int) -> int | str | None:
    """The exit code of a process that ended, None while it runs."""
    child = _children.get(pid)
    if child is not None:
        return child.poll()
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # A zombie has ended; only its parent's wait() would give the exit code.
            return "zombie" if stat.read().rsplit(")", 1)[1].split()[0] == "Z" else None
    except FileNotFoundError:
        return "gone"
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "gone"
    return None


def _is_llama_server(state: ServerState) -> bool:
    """Guards against a recycled pid: only signal a process that still runs our binary."""
    try:
        cmdline = Path(f"/proc/{state.pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return False
    except OSError:
        return _exit_code(state.pid) is None
    return bool(cmdline) and cmdline[0].decode(errors="replace") == str(state.binary)


def _terminate(pid: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while _exit_code(pid) is None:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            break
        time.sleep(POLL_S)
    child = _children.pop(pid, None)
    if child is not None:
        child.wait()


def stop_server(port: int | None = None, *, state_dir: Path | None = None, log: Log = print) -> ServerState:
    """Stop the server on `port`, or the only one started, and forget it."""
    directory = state_dir or default_state_dir()
    state = _choose_state(port, directory)
    if _exit_code(state.pid) is None and _is_llama_server(state):
        _terminate(state.pid)
        log(f"stopped llama-server (pid {state.pid}) at {state.url}")
    else:
        log(f"llama-server (pid {state.pid}) at {state.url} was no longer running; forgot it")
    _state_file(directory, state.port).unlink(missing_ok=True)
    return state


def _choose_state(port: int | None, directory: Path) -> ServerState:
    if port is not None:
        state = find_state(port, directory)
        if state is None:
            raise LaunchError(f"no llama-server started by refactor-agent on port {port} (state in {directory})")
        return state
    states = read_states(directory)
    if not states:
        raise LaunchError(f"no llama-server started by refactor-agent (state in {directory})")
    if len(states) > 1:
        ports = ", ".join(str(state.port) for state in states)
        raise LaunchError(f"several servers are running (ports {ports}): pass --port")
    return states[0]


def server_status(state: ServerState) -> ServerStatus:
    running = _exit_code(state.pid) is None and _is_llama_server(state)
    with LlamaServerAPI(state.url, timeout_s=2.0) as api:
        try:
            health = str(api.health().get("status", "ok"))
        except (ServerLoading, ServerUnreachable) as error:
            health = str(error)
    return ServerStatus(state=state, running=running, health=health)
