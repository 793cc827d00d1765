"""The build's egress proxy, on loopback only: allowed hosts and ports are relayed byte for byte, others refused and
named; silent clients are dropped; each refused or failed connection is one line, never a traceback."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.environment.egress import EgressProxy, host_endpoints, url_endpoint


@pytest.fixture
def echo_server() -> Iterator[int]:
    """A loopback TCP server that answers every line with the line reversed."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with server:
            connection, _ = server.accept()
            with connection:
                connection.sendall(connection.recv(1024)[::-1])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    port = server.getsockname()[1]
    yield port
    if thread.is_alive():  # a test that never connected: one connection ends the accept() it waits in
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            pass
    thread.join(5)


def ask(socket_path: Path, request: bytes) -> socket.socket:
    client = socket.socket(socket.AF_UNIX)
    client.settimeout(10)
    client.connect(str(socket_path))
    client.sendall(request)
    return client


def test_an_allowed_host_is_tunnelled_and_any_other_is_refused_by_name(tmp_path: Path, echo_server: int) -> None:
    with EgressProxy(tmp_path / "egress.sock", {("127.0.0.1", echo_server)}) as proxy:
        with ask(tmp_path / "egress.sock", f"CONNECT 127.0.0.1:{echo_server} HTTP/1.1\r\n\r\n".encode()) as tunnel:
            assert tunnel.recv(1024).startswith(b"HTTP/1.1 200")
            tunnel.sendall(b"abc")
            assert tunnel.recv(1024) == b"cba"
        with ask(tmp_path / "egress.sock", b"CONNECT files.example.com:443 HTTP/1.1\r\n\r\n") as refused:
            answer = refused.recv(1024)
        with ask(tmp_path / "egress.sock", b"GET http://other.example/simple/ HTTP/1.1\r\n\r\n") as plain:
            plain_answer = plain.recv(1024)
    assert answer.startswith(b"HTTP/1.1 403") and b"files.example.com:443 is not an allowed" in answer
    assert plain_answer.startswith(b"HTTP/1.1 403")
    assert proxy.denied == ["files.example.com:443", "other.example:80"]


def test_connections_are_chained_to_the_hosts_own_proxy_with_its_credentials(tmp_path: Path) -> None:
    """The upstream is a loopback stand-in: it records the head it gets, answers 200 and echoes reversed."""
    upstream = socket.create_server(("127.0.0.1", 0))
    heads: list[bytes] = []

    def serve() -> None:
        with upstream:
            connection, _ = upstream.accept()
            with connection:
                heads.append(connection.recv(4096))
                connection.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                connection.sendall(connection.recv(1024)[::-1])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    address = f"http://user:p%40ss@127.0.0.1:{upstream.getsockname()[1]}"
    with (
        EgressProxy(tmp_path / "egress.sock", {("pypi.org", 443)}, address),
        ask(tmp_path / "egress.sock", b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n") as tunnel,
    ):
        assert tunnel.recv(1024).startswith(b"HTTP/1.1 200")
        tunnel.sendall(b"xyz")
        assert tunnel.recv(1024) == b"zyx"
    thread.join(5)
    assert heads[0].startswith(b"CONNECT pypi.org:443 HTTP/1.1\r\n")
    assert b"Proxy-Authorization: Basic dXNlcjpwQHNz\r\n" in heads[0], "user:p@ss, percent-decoded"


def test_only_the_ports_of_the_indexes_are_relayed(tmp_path: Path, echo_server: int) -> None:
    """An allowed host on another port (the host's own services on loopback, say) is refused like any host."""
    other = socket.create_server(("127.0.0.1", 0))
    port = other.getsockname()[1]
    lines: list[str] = []
    with other, EgressProxy(tmp_path / "egress.sock", {("127.0.0.1", echo_server)}, log=lines.append) as proxy:
        with ask(tmp_path / "egress.sock", f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode()) as refused:
            assert refused.recv(1024).startswith(b"HTTP/1.1 403")
    assert proxy.denied == [f"127.0.0.1:{port}"]
    assert lines == [f"egress: refused 127.0.0.1:{port}: not an allowed package index (host and port)"]
    assert url_endpoint("https://pypi.org/simple") == ("pypi.org", 443)
    assert url_endpoint("http://mirror.example:8080/simple") == ("mirror.example", 8080)
    assert url_endpoint("file:///srv/simple") is None
    assert host_endpoints("deb.debian.org") == {("deb.debian.org", 443), ("deb.debian.org", 80)}
    assert host_endpoints("apt.internal:3142") == {("apt.internal", 3142)}


def test_a_silent_client_is_dropped_and_failures_are_one_line_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tracebacks: list[object] = []
    monkeypatch.setattr(threading, "excepthook", tracebacks.append)
    closed = socket.create_server(("127.0.0.1", 0))
    unreachable = closed.getsockname()[1]
    closed.close()
    lines: list[str] = []
    proxy = EgressProxy(tmp_path / "egress.sock", {("127.0.0.1", unreachable)}, log=lines.append, head_timeout_s=0.1)
    with proxy:
        with ask(tmp_path / "egress.sock", b"") as silent:
            assert silent.recv(1024) == b"", "the proxy closes a connection that sends no request"
        with ask(tmp_path / "egress.sock", f"CONNECT 127.0.0.1:{unreachable} HTTP/1.1\r\n\r\n".encode()) as failed:
            assert failed.recv(1024).startswith(b"HTTP/1.1 502")
        reset = ask(tmp_path / "egress.sock", b"CONNECT pypi.org:4")
        reset.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        reset.close()
        with ask(tmp_path / "egress.sock", b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n") as last:
            last.recv(1024)  # answered: every earlier connection has been handled by now
    assert lines[0] == "egress: dropped a connection that sent no request within 0.1s"
    assert lines[1].startswith(f"egress: cannot reach 127.0.0.1:{unreachable}: ")
    assert all("\n" not in line and "Traceback" not in line for line in lines)
    assert tracebacks == [], "no connection's failure reaches the thread's exception hook"


def test_a_connection_that_outlives_the_build_neither_connects_nor_writes_to_its_closed_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build's proxy closes while uv still has connections in flight (seen on a loaded machine, with DNS slow to
    answer): their handlers used to go on, connect, and log into the build log the build had closed, ending in
    `ValueError: write to closed file` tracebacks on the terminal."""
    tracebacks: list[object] = []
    monkeypatch.setattr(threading, "excepthook", tracebacks.append)
    closed = socket.create_server(("127.0.0.1", 0))
    unreachable = closed.getsockname()[1]
    closed.close()
    build_over = threading.Event()
    lines: list[str] = []

    def build_log(line: str) -> None:
        if build_over.is_set():
            raise ValueError("write to closed file")  # what BuildLog.event does once the build has ended
        lines.append(line)

    before = set(threading.enumerate())
    with EgressProxy(tmp_path / "egress.sock", {("127.0.0.1", unreachable)}, log=build_log, head_timeout_s=30):
        late = ask(tmp_path / "egress.sock", f"CONNECT 127.0.0.1:{unreachable} HTTP/1.1\r\n".encode())
        deadline = time.monotonic() + 10
        while len(set(threading.enumerate()) - before) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # the proxy's accept loop and the late connection's handler
    build_over.set()
    with late:
        with contextlib.suppress(OSError):  # the proxy may have closed it already: nothing more is said there
            late.sendall(b"\r\n")
            late.recv(1024)
    for thread in set(threading.enumerate()) - before:
        thread.join(10)
    assert tracebacks == [] and lines == []
