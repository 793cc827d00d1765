"""The build's egress proxy, on loopback only: allowed hosts are relayed byte for byte, others refused and named."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.environment.egress import EgressProxy


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
    yield server.getsockname()[1]
    thread.join(5)


def ask(socket_path: Path, request: bytes) -> socket.socket:
    client = socket.socket(socket.AF_UNIX)
    client.settimeout(10)
    client.connect(str(socket_path))
    client.sendall(request)
    return client


def test_an_allowed_host_is_tunnelled_and_any_other_is_refused_by_name(tmp_path: Path, echo_server: int) -> None:
    with EgressProxy(tmp_path / "egress.sock", {"127.0.0.1"}) as proxy:
        with ask(tmp_path / "egress.sock", f"CONNECT 127.0.0.1:{echo_server} HTTP/1.1\r\n\r\n".encode()) as tunnel:
            assert tunnel.recv(1024).startswith(b"HTTP/1.1 200")
            tunnel.sendall(b"abc")
            assert tunnel.recv(1024) == b"cba"
        with ask(tmp_path / "egress.sock", b"CONNECT files.example.com:443 HTTP/1.1\r\n\r\n") as refused:
            answer = refused.recv(1024)
        with ask(tmp_path / "egress.sock", b"GET http://other.example/simple/ HTTP/1.1\r\n\r\n") as plain:
            plain_answer = plain.recv(1024)
    assert answer.startswith(b"HTTP/1.1 403") and b"files.example.com is not an allowed" in answer
    assert plain_answer.startswith(b"HTTP/1.1 403")
    assert proxy.denied == ["files.example.com:443", "other.example:80"]
