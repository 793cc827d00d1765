"""The Docker sandbox: isolation, ownership, timeouts, output floods and cleanup, against the real daemon."""

import hashlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
from docker.types import Mount

from sandbox import (
    DEFAULT_IMAGE,
    LABEL,
    DockerSandbox,
    SandboxError,
    SandboxLimits,
    docker_client,
    require_image,
    sweep_leftovers,
)
from sandbox.container import OWNER_LABEL
from sandbox.disk import free_bytes
from sandbox.output import OutputCapture
from sandbox.owner import current_owner, owner_is_gone
from sandbox.pids import CGROUP_ROOT, ProcessTable

from support.repos import git, make_repo

WORKSPACE_OWNER = 1234
MIB = 1024**2
# Writes up to 1 GiB into the workspace, one MiB at a time, unless it is stopped first.
FILL_THE_DISK = "for i in $(seq 1024); do head -c 1M /dev/zero >> big; done; echo finished"


# --- output capping (no Docker) ---


def test_short_output_is_kept_whole() -> None:
    capture = OutputCapture(100)
    capture.add(b"hello ")
    capture.add(b"world\n")
    assert capture.render() == "hello world\n"
    assert capture.total_bytes == 12
    assert not capture.truncated


def test_long_output_keeps_head_and_tail_and_says_how_much_was_cut() -> None:
    capture = OutputCapture(20)
    capture.add(b"A" * 10 + b"middle" * 1000 + b"B" * 10)
    text = capture.render()
    assert text.startswith("A" * 10)
    assert text.endswith("B" * 10)
    assert "[... 6000 bytes of output cut ...]" in text
    assert capture.truncated
    assert capture.total_bytes == 6020


def test_memory_stays_bounded_however_much_is_printed() -> None:
    capture = OutputCapture(1000)
    chunk = bytes(range(256)) * 64
    for _ in range(2000):  # 32 MiB in 16 KiB chunks
        capture.add(chunk)
    assert len(capture.head) + len(capture.tail) == 1000
    assert capture.total_bytes == 2000 * len(chunk)
    assert capture.tail == (chunk * 2)[-500:]


def test_how_output_is_chunked_does_not_change_what_is_kept() -> None:
    data = bytes(i % 251 for i in range(5000))
    whole, bytewise = OutputCapture(300), OutputCapture(300)
    whole.add(data)
    for i in range(len(data)):
        bytewise.add(data[i : i + 1])
    assert whole.render() == bytewise.render()


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    capture = OutputCapture(100)
    capture.add(b"ok \xff\xfe\x00 caf\xc3")
    assert capture.render() == "ok \ufffd\ufffd\x00 caf\ufffd"


# --- owners of containers (no Docker) ---


def test_a_live_owner_is_not_gone() -> None:
    assert not owner_is_gone(current_owner())


def test_an_ended_owner_is_gone() -> None:
    child = subprocess.run(
        [sys.executable, "-c", "from sandbox.owner import current_owner; print(current_owner())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert owner_is_gone(child.stdout.strip())


def test_an_owner_on_another_host_is_never_judged_gone() -> None:
    assert not owner_is_gone("some-other-host-name:1:1")


# --- real containers ---


@pytest.fixture(scope="module")
def client() -> docker.DockerClient:
    client = docker_client()
    require_image(client, DEFAULT_IMAGE)
    return client


def _chown_in_docker(client: docker.DockerClient, path: Path, uid: int) -> None:
    """chown -R by the daemon's root: any user can give a directory to another owner (and take it back)."""
    client.containers.run(
        DEFAULT_IMAGE,
        ["chown", "-R", f"{uid}:{uid}", "/target"],
        mounts=[Mount("/target", str(path), type="bind")],
        user="0:0",
        network_mode="none",
        remove=True,
    )


def _workspace_owned_by(client: docker.DockerClient, path: Path, uid: int) -> Iterator[Path]:
    path.mkdir()
    _chown_in_docker(client, path, uid)
    yield path
    _chown_in_docker(client, path, os.getuid())  # so that pytest can delete what the container made


@pytest.fixture
def owned_workspace(client: docker.DockerClient, tmp_path: Path) -> Iterator[Path]:
    """A workspace owned by someone else than the test's user, whoever that is."""
    yield from _workspace_owned_by(client, tmp_path / "workspace", WORKSPACE_OWNER)


@pytest.fixture
def root_workspace(client: docker.DockerClient, tmp_path: Path) -> Iterator[Path]:
    yield from _workspace_owned_by(client, tmp_path / "root-workspace", 0)


@pytest.fixture
def sandbox(client: docker.DockerClient, owned_workspace: Path) -> Iterator[DockerSandbox]:
    with DockerSandbox(DEFAULT_IMAGE, owned_workspace, run_id="test-sandbox", client=client) as box:
        yield box


def _container_exists(client: docker.DockerClient, container_id: str) -> bool:
    try:
        client.containers.get(container_id)
    except docker.errors.NotFound:
        return False
    return True


@pytest.mark.docker
def test_exit_code_and_interleaved_output(sandbox: DockerSandbox) -> None:
    result = sandbox.execute("echo out; echo err >&2; exit 3")
    assert result.exit_code == 3
    assert result.output.splitlines() == ["out", "err"]
    assert not result.timed_out
    assert not result.truncated


@pytest.mark.docker
def test_commands_run_in_the_workspace_with_home_in_tmp_and_no_stdin(sandbox: DockerSandbox) -> None:
    result = sandbox.execute('pwd; echo "$HOME"; cat; echo end')
    assert result.output.splitlines() == ["/workspace", "/tmp", "end"]


@pytest.mark.docker
def test_stdin_is_the_whole_input_then_end_of_file(sandbox: DockerSandbox) -> None:
    data = bytes(range(256)) * 8192  # 2 MiB, more than any socket buffer holds at once
    result = sandbox.execute("echo first; sha256sum; echo end", stdin=data, timeout_s=60)
    assert result.output.splitlines() == ["first", f"{hashlib.sha256(data).hexdigest()}  -", "end"]
    assert sandbox.execute("cat; echo none", stdin=b"").output == "none\n"


@pytest.mark.docker
def test_files_made_in_the_container_belong_to_the_workspace_owner(
    sandbox: DockerSandbox, owned_workspace: Path
) -> None:
    result = sandbox.execute("id -u; mkdir made && touch made/file")
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(WORKSPACE_OWNER)
    for path in (owned_workspace / "made", owned_workspace / "made" / "file"):
        assert (path.stat().st_uid, path.stat().st_gid) == (WORKSPACE_OWNER, WORKSPACE_OWNER)


@pytest.mark.docker
def test_there_is_no_network(sandbox: DockerSandbox) -> None:
    # Only loopback exists, so the kernel refuses the connection before any packet could leave.
    probe = textwrap.dedent(
        """
        import errno, os, socket
        print(sorted(os.listdir("/sys/class/net")))
        try:
            socket.create_connection(("192.0.2.1", 80), timeout=5)
        except OSError as error:
            print(errno.errorcode.get(error.errno, error))
        else:
            print("connected")
        """
    )
    result = sandbox.execute(f"python3 -c '{probe}'")
    assert result.output.splitlines() == ["['lo']", "ENETUNREACH"]


@pytest.mark.docker
def test_a_timeout_kills_the_command_and_the_container_stays_usable(sandbox: DockerSandbox) -> None:
    # The ignored TERM is inherited by sleep, so only timeout's follow-up KILL ends it.
    result = sandbox.execute("trap '' TERM; sleep 300; echo finished", timeout_s=1)
    assert result.timed_out
    assert result.exit_code is None
    assert "finished" not in result.output
    after = sandbox.execute("ps -eo comm=")
    assert after.exit_code == 0
    assert "sleep" in after.output.split()  # the container's own idle `sleep infinity`
    assert after.output.split().count("sleep") == 1


@pytest.mark.docker
def test_a_command_that_finishes_in_time_is_not_timed_out(sandbox: DockerSandbox) -> None:
    result = sandbox.execute("sleep 0.2; echo done", timeout_s=30)
    assert (result.exit_code, result.timed_out, result.output) == (0, False, "done\n")


@pytest.mark.docker
def test_endless_output_is_killed_with_bounded_capture(sandbox: DockerSandbox) -> None:
    result = sandbox.execute("cat /dev/zero", timeout_s=300, max_output_bytes=10_000)
    assert result.truncated
    assert result.exit_code is None
    assert not result.timed_out
    assert 10_000 < result.total_bytes < 1024**3
    assert len(result.output.encode()) < 10_000 + 100
    assert sandbox.execute("echo alive").output == "alive\n"


@pytest.mark.docker
def test_gigabytes_of_output_do_not_run_to_the_end(sandbox: DockerSandbox) -> None:
    result = sandbox.execute("yes | head -c 2G")
    assert result.truncated
    assert result.exit_code is None
    assert result.total_bytes < 2 * 1024**3
    assert len(result.output.encode()) < 256_000 + 100


@pytest.mark.docker
def test_long_output_keeps_its_beginning_and_end(sandbox: DockerSandbox) -> None:
    result = sandbox.execute("seq 1 200000", max_output_bytes=2_000)
    expected_bytes = sum(len(f"{n}\n") for n in range(1, 200_001))
    assert result.exit_code == 0
    assert result.truncated
    assert result.total_bytes == expected_bytes
    assert result.output.startswith("1\n2\n3\n")
    assert result.output.endswith("199999\n200000\n")
    assert f"[... {expected_bytes - 2_000} bytes of output cut ...]" in result.output


@pytest.mark.docker
def test_binary_output_is_decoded_leniently(sandbox: DockerSandbox) -> None:
    result = sandbox.execute("head -c 100000 /dev/urandom")
    assert result.exit_code == 0
    assert result.total_bytes == 100_000
    assert "\ufffd" in result.output


@pytest.mark.docker
def test_capabilities_are_dropped_even_for_root(client: docker.DockerClient, root_workspace: Path) -> None:
    with DockerSandbox(DEFAULT_IMAGE, root_workspace, run_id="test-caps", client=client) as box:
        result = box.execute("id -u; touch file; chown 1234 file")
    lines = result.output.splitlines()
    assert lines[0] == "0"
    assert "Operation not permitted" in lines[1]
    assert result.exit_code != 0
    assert (root_workspace / "file").stat().st_uid == 0


@pytest.mark.docker
def test_container_is_confined(client: docker.DockerClient, sandbox: DockerSandbox) -> None:
    container = client.containers.get(sandbox.container_id)
    host = container.attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Init"] is True
    assert host["PidsLimit"] == 512
    assert host["Memory"] == 4 * 1024**3
    assert "/tmp" in host["Tmpfs"]
    assert container.labels[LABEL] == "test-sandbox"


@pytest.mark.docker
def test_a_program_written_to_tmp_runs(sandbox: DockerSandbox) -> None:
    # As a suite's test does with tmp_path: click's fake pagers (Docker mounts a tmpfs noexec by default).
    result = sandbox.execute("printf '#!/bin/sh\\necho ran\\n' > /tmp/pager && chmod +x /tmp/pager && /tmp/pager")
    assert (result.exit_code, result.output) == (0, "ran\n")


@pytest.mark.docker
def test_a_task_sandbox_works_where_paths_hold_colons_and_commas(client: docker.DockerClient, tmp_path: Path) -> None:
    # As the runner mounts it: the worktree read-write, the repository's git directory read-only at its own path.
    repo = make_repo(tmp_path / "user:repo,one")
    worktree = tmp_path / "scratch:dir,two" / "worktree"
    git(repo, "worktree", "add", "-q", "-b", "task", str(worktree))
    with DockerSandbox(
        DEFAULT_IMAGE, worktree, run_id="test-colon", client=client, read_only_paths=[repo / ".git"]
    ) as box:
        result = box.execute("git status --porcelain && echo made > made.txt && git status --porcelain")
    assert (result.exit_code, result.output) == (0, "?? made.txt\n")
    assert (worktree / "made.txt").read_text() == "made\n"


@pytest.mark.docker
def test_a_fork_bomb_gets_a_fresh_sandbox_and_the_workspace_survives(
    client: docker.DockerClient, tmp_path: Path
) -> None:
    limits = SandboxLimits(pids=64)
    with DockerSandbox(DEFAULT_IMAGE, tmp_path, run_id="test-fork-bomb", limits=limits, client=client) as box:
        bombed = box.container_id
        assert box.execute("echo kept > note; echo kept > /tmp/note").exit_code == 0
        result = box.execute(":(){ :|:& };:", timeout_s=60)
        # Straight after the bomb: in the bombed container this could not even fork its shell.
        after = box.execute("echo ok; cat note; cat /tmp/note")
    assert after.output.splitlines()[:2] == ["ok", "kept"]
    assert "No such file" in after.output  # /tmp went with the old container
    assert result.sandbox_restarted
    assert result.exit_code is None
    assert bombed is not None and not _container_exists(client, bombed)
    assert not after.sandbox_restarted
    assert result.duration_s < 60  # found out by the process count, not by the command's timeout


@pytest.mark.docker
@pytest.mark.parametrize("cgroup_root", [CGROUP_ROOT, Path("/no/cgroups/here")], ids=["cgroup-files", "daemon-stats"])
def test_a_process_table_filled_in_the_background_is_seen(client: docker.DockerClient, cgroup_root: Path) -> None:
    container = client.containers.run(
        DEFAULT_IMAGE, ["sleep", "infinity"], detach=True, pids_limit=64, network_mode="none", init=True
    )
    try:
        table = ProcessTable(client, container, cgroup_root=cgroup_root)
        assert (table.cgroup is not None) == (cgroup_root == CGROUP_ROOT)
        assert not table.full()
        container.exec_run(["bash", "-c", "(:(){ :|:& };:) >/dev/null 2>&1 </dev/null &"])
        deadline = time.monotonic() + 60
        while not table.full():
            assert time.monotonic() < deadline, f"never seen full: {table.counts()}"
            time.sleep(0.2)
    finally:
        container.remove(force=True)


@pytest.mark.docker
def test_a_command_that_grows_the_workspace_past_its_cap_is_stopped(
    client: docker.DockerClient, tmp_path: Path
) -> None:
    limits = SandboxLimits(workspace_growth_bytes=32 * MIB)
    with DockerSandbox(DEFAULT_IMAGE, tmp_path, run_id="test-disk-cap", limits=limits, client=client) as box:
        result = box.execute(FILL_THE_DISK, timeout_s=300)
        assert box.execute("echo alive").output == "alive\n"
    assert result.disk_full is not None and "over its 32.0 MiB cap" in result.disk_full
    assert (result.exit_code, result.timed_out) == (None, False)
    assert "finished" not in result.output
    assert (tmp_path / "big").stat().st_size < 1024 * MIB


@pytest.mark.docker
def test_a_command_that_takes_the_disk_under_its_free_floor_is_stopped(
    client: docker.DockerClient, tmp_path: Path
) -> None:
    limits = SandboxLimits(disk_free_floor_bytes=max(free_bytes(tmp_path) - 64 * MIB, 0))
    with DockerSandbox(DEFAULT_IMAGE, tmp_path, run_id="test-disk-floor", limits=limits, client=client) as box:
        result = box.execute(FILL_THE_DISK, timeout_s=300)
    assert result.disk_full is not None and "left free on the disk holding the workspace" in result.disk_full
    assert result.exit_code is None
    assert "finished" not in result.output


@pytest.mark.docker
def test_a_quick_write_past_the_cap_is_reported_though_it_ended(client: docker.DockerClient, tmp_path: Path) -> None:
    limits = SandboxLimits(workspace_growth_bytes=16 * MIB)
    with DockerSandbox(DEFAULT_IMAGE, tmp_path, run_id="test-disk-quick", limits=limits, client=client) as box:
        result = box.execute("fallocate -l 64M big")
        cleaned = box.execute("rm big")
    assert result.exit_code == 0
    assert result.disk_full is not None and "over its 16.0 MiB cap" in result.disk_full
    assert (cleaned.exit_code, cleaned.disk_full) == (0, None)  # freeing space is never blamed


@pytest.mark.docker
@pytest.mark.parametrize("interruption", [RuntimeError, KeyboardInterrupt])
def test_leaving_the_block_removes_the_container(
    client: docker.DockerClient, tmp_path: Path, interruption: type[BaseException]
) -> None:
    box = DockerSandbox(DEFAULT_IMAGE, tmp_path, run_id="test-close", client=client)
    with pytest.raises(interruption), box:
        container_id = box.container_id
        assert container_id is not None and _container_exists(client, container_id)
        raise interruption()
    assert not _container_exists(client, container_id)
    box.close()  # a second close is harmless


@pytest.mark.docker
def test_execute_before_start_is_a_clear_error(client: docker.DockerClient, tmp_path: Path) -> None:
    box = DockerSandbox(DEFAULT_IMAGE, tmp_path, run_id="test-unstarted", client=client)
    with pytest.raises(SandboxError, match="not started"):
        box.execute("true")


def _sandbox_in_child_process(workspace: Path, run_id: str, then: str) -> tuple[subprocess.Popen[str], str]:
    """A separate Python process that starts a sandbox, prints its container id, then runs `then`."""
    program = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from sandbox import DockerSandbox
        with DockerSandbox({DEFAULT_IMAGE!r}, Path({str(workspace)!r}), run_id={run_id!r}) as box:
            print(box.container_id, flush=True)
            {then}
        """
    )
    # A test runner started in the background ignores SIGINT, and the child would inherit that.
    child = subprocess.Popen(
        [sys.executable, "-c", program],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert child.stdout is not None
    return child, child.stdout.readline().strip()


def _wait_for(path: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} did not appear within {timeout_s}s"
        time.sleep(0.05)


@pytest.mark.docker
def test_ctrl_c_during_a_command_removes_the_container(client: docker.DockerClient, tmp_path: Path) -> None:
    child, container_id = _sandbox_in_child_process(tmp_path, "test-ctrl-c", "box.execute('touch started; sleep 300')")
    assert _container_exists(client, container_id)
    _wait_for(tmp_path / "started")  # the command runs: the interrupt lands in the middle of it
    child.send_signal(signal.SIGINT)
    assert child.wait(timeout=60) != 0
    assert not _container_exists(client, container_id)


@pytest.mark.docker
def test_sweep_removes_containers_of_a_killed_run_only(client: docker.DockerClient, tmp_path: Path) -> None:
    child, leftover_id = _sandbox_in_child_process(tmp_path, "test-crashed", "sys.stdin.read()")
    child.kill()
    child.wait()
    assert _container_exists(client, leftover_id)
    with DockerSandbox(DEFAULT_IMAGE, tmp_path, run_id="test-alive", client=client) as alive:
        assert sweep_leftovers(client, older_than_run="test-alive") >= 1
        assert not _container_exists(client, leftover_id)
        assert alive.container_id is not None and _container_exists(client, alive.container_id)


def test_a_sweep_racing_another_sweep_does_not_fail() -> None:
    """Two runs starting together both sweep a dead run's container: the second gets 409 "removal in progress"."""

    class BeingRemoved:
        name = "refactor-agent-dead-run-abc123"

        @property
        def labels(self) -> dict[str, str]:
            return {LABEL: "dead-run", OWNER_LABEL: f"{socket.gethostname()}:999999999:0"}  # no such process

        def remove(self, force: bool, v: bool) -> None:
            raise docker.errors.APIError("409 Client Error: Conflict (removal of container is already in progress)")

    class Containers:
        def list(self, **filters: object) -> list[BeingRemoved]:
            return [BeingRemoved()]

    class Client:
        containers = Containers()

    assert sweep_leftovers(Client()) == 0  # type: ignore[arg-type]
