"""A repository's devcontainer with the real Docker daemon: its build reaches nothing of the host's network, the
daemon fetches nothing for it, it builds only on allowed local images, and it ends at the night's deadline."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import docker
import git
import pytest

from agent.environment.stage import prepare_environment
from agent.protocol.config import NightConfig, RunConfig
from agent.protocol.environment import EnvironmentSpec
from agent.protocol.records import EnvironmentRecord
from sandbox import DEFAULT_IMAGE, DockerSandbox, docker_client

from support.environment_images import own_repository_name
from support.repos import make_repo
from support.scripted_model import ScriptedModel, run_in_process

pytestmark = pytest.mark.docker


class Listener:
    """A TCP server on the host's loopback that notes every connection and what it was sent."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.received: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(5)
                try:
                    self.received.append(connection.recv(4096))
                    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nfetched")
                except OSError:
                    self.received.append(b"")

    def close(self) -> None:
        # Shut down first, and wait: an accept() still on its way would otherwise take connections meant for the
        # next socket given the same descriptor (another test's server).
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self._thread.join(10)
        self.server.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    served = Listener()
    yield served
    served.close()


@pytest.fixture
def online_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's index is a remote one (PyPI), as for most users: the builds may not run offline."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in list(os.environ):
        if name.startswith(("PIP_", "UV_")) and name != "PIP_CONFIG_FILE":
            monkeypatch.delenv(name)


@pytest.fixture
def name() -> Iterator[str]:
    with own_repository_name("isolation") as unique:
        yield unique


def devcontainer_repo(path: Path, dockerfile: str, extra: dict[str, str] | None = None) -> Path:
    files = {
        ".devcontainer/devcontainer.json": '{"build": {"dockerfile": "Dockerfile"}}',
        ".devcontainer/Dockerfile": dockerfile,
        "tests/test_one.py": "def test_one():\n    assert True\n",
        **(extra or {}),
    }
    return make_repo(path, files)


def prepare(repo: Path, log: Path, **options: object) -> EnvironmentRecord:
    settings: dict[str, object] = {
        "client": docker_client(),
        "sandbox_image": DEFAULT_IMAGE,
        "image_explicit": False,
        "spec": None,
        "test_command": None,
        "log_path": log,
        "progress": lambda _: None,
    }
    return prepare_environment(git.Repo(repo), **{**settings, **options})


REACH_THE_HOST = (
    "import socket, sys\n"
    "try:\n"
    "    socket.create_connection(('127.0.0.1', {port}), 3).sendall(b'from the build')\n"
    "    print('REACHED the host')\n"
    "except OSError as error:\n"
    "    print('unreachable:', error)\n"
)
SNIFF_LOOPBACK = (
    "import socket, time\n"
    "raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))\n"
    "raw.bind(('lo', 0))\n"
    "raw.settimeout(0.5)\n"
    "end = time.time() + 4\n"
    "while time.time() < end:\n"
    "    try:\n"
    "        if b'host-secret-marker' in raw.recv(65536):\n"
    "            print('SNIFFED host traffic'); break\n"
    "    except OSError:\n"
    "        pass\n"
)


def test_a_dockerfile_build_reaches_nothing_on_the_hosts_loopback_and_sniffs_none_of_it(
    tmp_path: Path, listener: Listener, online_index: None, name: str
) -> None:
    """Issue 18: the RUN steps shared the host's network with CAP_NET_RAW (a host listener was reached and host
    loopback traffic captured, where the agent's traffic with llama-server carries every packed repository)."""
    dockerfile = f"FROM {DEFAULT_IMAGE}\nCOPY *.py /tmp/\nRUN python3 /tmp/reach.py\nRUN python3 /tmp/sniff.py\n"
    scripts = {
        ".devcontainer/reach.py": REACH_THE_HOST.format(port=listener.port),
        ".devcontainer/sniff.py": SNIFF_LOOPBACK,
    }
    repo = devcontainer_repo(tmp_path / name, dockerfile, scripts)
    sending = threading.Event()

    def host_traffic() -> None:
        while not sending.is_set():
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                udp.sendto(b"host-secret-marker", ("127.0.0.1", listener.port))
            sending.wait(0.05)

    sender = threading.Thread(target=host_traffic, daemon=True)
    sender.start()
    try:
        record = prepare(repo, tmp_path / "build.log")
    finally:
        sending.set()
        sender.join(5)
    log = (tmp_path / "build.log").read_text()
    assert record.source == "devcontainer" and record.status == "built", (record, log)
    assert listener.received == [], "the build connected to a listener on the host's loopback"
    assert "unreachable:" in log and "REACHED" not in log
    assert "SNIFFED" not in log, "the build captured the host's loopback traffic"


@pytest.mark.parametrize(
    "dockerfile",
    [
        "FROM {sandbox}\nADD http://127.0.0.1:{port}/payload /payload\n",
        "FROM 127.0.0.1:{port}/team/base:1\nRUN true\n",
        "FROM {sandbox}\nCOPY --from=127.0.0.1:{port}/team/tools:1 /bin/tool /bin/tool\n",
    ],
    ids=["add-url", "from-registry", "copy-from-registry"],
)
def test_the_daemon_fetches_nothing_for_a_dockerfile_and_detection_takes_over(
    tmp_path: Path, listener: Listener, name: str, dockerfile: str
) -> None:
    """Issue 18: with every index local, dockerd itself fetched `ADD http://127.0.0.1:...` and tried to pull
    `FROM 127.0.0.1:.../x`; the fetched body ended up in the image the model works in."""
    text = dockerfile.format(sandbox=DEFAULT_IMAGE, port=listener.port)
    repo = devcontainer_repo(tmp_path / name, text)
    record = prepare(repo, tmp_path / "build.log")
    assert listener.received == [], "the Docker daemon reached the host's loopback for the Dockerfile"
    assert record.source != "devcontainer" and record.status != "failed", record
    (skipped,) = record.skipped
    assert skipped.startswith("devcontainer: .devcontainer/Dockerfile:")


def _containers_running(client: docker.DockerClient, command: str) -> list[str]:
    return [
        container.name
        for container in client.containers.list()
        if command in " ".join(container.attrs["Config"].get("Cmd") or [])
    ]


@pytest.mark.timeout(300)
def test_a_dockerfile_build_stops_at_the_nights_deadline_and_the_night_ends(tmp_path: Path, name: str) -> None:
    """Issue 18: `RUN sleep 3000` outlived `--deadline 60s`. Now the build is stopped at the deadline, the
    environment is recorded as failed with that reason, and the task is skipped as the deadline rules say."""
    marker = f"sleep 3{secrets.randbelow(1000):03d}"
    repo = devcontainer_repo(tmp_path / name, f"FROM {DEFAULT_IMAGE}\nRUN {marker}\n")
    night = NightConfig(
        repos=[RunConfig(repo=repo, tasks=["Add notes"], runs_dir=tmp_path / "runs", max_turns=2)],
        runs_dir=tmp_path / "runs",
        deadline_at=datetime.now().astimezone() + timedelta(seconds=20),
        min_task_time_s=0,
    )
    summary = run_in_process(night, ScriptedModel([]), run_id="deadline")
    environment = summary.environment
    assert environment is not None and environment.status == "failed", environment
    assert environment.failed_step == "docker build of Dockerfile in .devcontainer"
    assert "at the night's deadline" in (environment.error or "")
    (task,) = summary.tasks
    assert task.status == "skipped" and task.reason.startswith("deadline: "), task
    assert _containers_running(docker.from_env(), marker) == [], "the daemon stopped the RUN in progress"


def test_a_lifecycle_step_is_stopped_from_the_host_on_a_base_without_timeout(tmp_path: Path, name: str) -> None:
    """Issue 18: a lifecycle step on a base without `timeout` had no time bound at all."""
    marker = f"sleep 4{secrets.randbelow(1000):03d}"
    dockerfile = f"FROM {DEFAULT_IMAGE}\nUSER root\nRUN rm /usr/bin/timeout\n"
    devcontainer = f'{{"build": {{"dockerfile": "Dockerfile"}}, "postCreateCommand": "{marker}"}}'
    repo = devcontainer_repo(tmp_path / name, dockerfile, {".devcontainer/devcontainer.json": devcontainer})
    record = prepare(repo, tmp_path / "build.log", deadline=time.time() + 15)
    assert record.status == "failed" and record.failed_step == "devcontainer: postCreateCommand", record
    assert "at the night's deadline" in (record.error or "")
    assert _containers_running(docker.from_env(), marker) == []


def test_environment_images_declare_no_volumes_and_tasks_leave_no_volume_behind(tmp_path: Path, name: str) -> None:
    """Issue 18: environment images declared the build's bind mounts as VOLUMEs, and every task leaked 4-5
    anonymous volumes. A Dockerfile's own VOLUME goes with the task's container too."""
    dockerfile = f"FROM {DEFAULT_IMAGE}\nVOLUME /data\n"
    devcontainer = '{"build": {"dockerfile": "Dockerfile"}, "postCreateCommand": "true"}'
    repo = devcontainer_repo(tmp_path / name, dockerfile, {".devcontainer/devcontainer.json": devcontainer})
    record = prepare(repo, tmp_path / "build.log")
    assert record.status == "built", record
    client = docker.from_env()
    assert set(client.images.get(record.image).attrs["Config"].get("Volumes") or {}) == {"/data"}
    with pytest.raises(docker.errors.ImageNotFound):
        client.images.get(f"{record.image}-base")  # the Dockerfile's intermediate tag is not left behind
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with DockerSandbox(record.image, workspace, run_id=f"{name}-volumes") as sandbox:
        mounts = client.containers.get(sandbox.container_id).attrs["Mounts"]
        anonymous = [mount["Name"] for mount in mounts if mount["Type"] == "volume"]
        assert len(anonymous) == 1, mounts
    remaining = {volume.name for volume in client.volumes.list()}
    assert not remaining & set(anonymous), "the task's anonymous volume outlived its container"


def test_a_devcontainer_is_not_used_when_the_user_gives_an_environment_table(tmp_path: Path, name: str) -> None:
    """Issue 19: the devcontainer silently won over an explicit --environment; the record names both."""
    devcontainer = f'{{"image": "{DEFAULT_IMAGE}", "postCreateCommand": "exit 7"}}'
    repo = devcontainer_repo(tmp_path / name, "", {".devcontainer/devcontainer.json": devcontainer})
    record = prepare(repo, tmp_path / "build.log", spec=EnvironmentSpec(detect=False, setup=["true"]))
    assert record.source == "environment-file" and record.status == "built", record
    assert record.sources == ["[environment] table"]
    assert record.skipped == [
        "devcontainer: .devcontainer/devcontainer.json: not used, the [environment] table given wins over the "
        "repository's"
    ]


def test_a_devcontainer_image_from_a_registry_falls_back_to_detection(tmp_path: Path, name: str) -> None:
    """Issue 19: a devcontainer whose image comes from a registry failed the build and nothing fell back."""
    image = "mcr.microsoft.com/devcontainers/python:3.11"
    lines: list[str] = []
    repo = devcontainer_repo(tmp_path / name, "", {".devcontainer/devcontainer.json": f'{{"image": "{image}"}}'})
    record = prepare(repo, tmp_path / "build.log", allowed_base_images=[image], progress=lines.append)
    assert record.source == "none" and record.status == "as_is" and record.tests_collected == 1, record
    reason = f"devcontainer: .devcontainer/devcontainer.json: base image {image} is not on this machine"
    assert record.skipped == [f"{reason} (no registry is used)"]
    assert [line for line in lines if line.startswith("environment: ")] == [
        f"environment: {reason} (no registry is used); instead: no dependencies detected: the sandbox image as is"
    ]


def test_lifecycle_steps_run_with_the_six_build_capabilities_only(tmp_path: Path, name: str) -> None:
    """Root in the build container may install files and let apt drop privileges; nothing else (no NET_RAW)."""
    command = 'grep -E \\"^Cap(Eff|Bnd)\\" /proc/self/status'
    devcontainer = f'{{"image": "{DEFAULT_IMAGE}", "postCreateCommand": "{command}"}}'
    repo = devcontainer_repo(tmp_path / name, "", {".devcontainer/devcontainer.json": devcontainer})
    record = prepare(repo, tmp_path / "build.log")
    assert record.status == "built", record
    log = (tmp_path / "build.log").read_text()
    # CHOWN 0, DAC_OVERRIDE 1, FOWNER 3, KILL 5, SETGID 6, SETUID 7: 0xeb.
    assert "CapEff:\t00000000000000eb" in log and "CapBnd:\t00000000000000eb" in log, log
