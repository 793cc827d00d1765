"""The build's only way out: an HTTP CONNECT proxy on the host that lets through the configured package index
hosts and refuses everything else, naming what was tried.

The build container has no network (`network_mode=none`, only its own loopback). A small forwarder inside it
(FORWARDER, run with the image's python3) listens on its loopback and relays each connection through a unix
socket, bind-mounted from the host, to this proxy; the build's commands find it through HTTP(S)_PROXY. The
proxy reads one request head, checks the host against the allowed list, and then only relays bytes (TLS goes
end to end: nothing is decrypted). When the host itself goes through a proxy, connections are chained to it.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

FORWARDER_PORT = 3128
HEAD_LIMIT_BYTES = 64 * 1024
CONNECT_TIMEOUT_S = 30
# Runs inside the build container: loopback TCP to the mounted unix socket, half-closes passed on.
FORWARDER = """
import socket, sys, threading
def pipe(source, target):
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        try:
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", int(sys.argv[2])))
server.listen(64)
print("forwarding", flush=True)
while True:
    client, _ = server.accept()
    upstream = socket.socket(socket.AF_UNIX)
    try:
        upstream.connect(sys.argv[1])
    except OSError:
        client.close()
        continue
    threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
    threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
"""


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


def _read_head(connection: socket.socket) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head and len(head) < HEAD_LIMIT_BYTES:
        chunk = connection.recv(4096)
        if not chunk:
            break
        head += chunk
    return head


def _target(method: str, target: str) -> tuple[str, int] | None:
    """(host, port) a request asks for: `CONNECT host:port`, or an absolute http URL."""
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        return (host.strip("[]"), int(port)) if port.isdigit() and host else None
    address = urlsplit(target)
    if address.scheme != "http" or not address.hostname:
        return None
    return address.hostname, address.port or 80


class EgressProxy:
    def __init__(
        self, socket_path: Path, allowed_hosts: set[str], upstream: str | None = None, no_proxy: str = ""
    ) -> None:
        self.socket_path = socket_path
        self.allowed_hosts = {host.lower() for host in allowed_hosts}
        self.upstream = urlsplit(upstream) if upstream else None
        self.no_proxy = [entry.strip().lstrip(".").lower() for entry in no_proxy.split(",") if entry.strip()]
        self.denied: list[str] = []
        self._server = socket.socket(socket.AF_UNIX)
        self._server.bind(str(socket_path))
        self._server.listen(64)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> EgressProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        self._thread.join(5)

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(connection,), daemon=True).start()

    def _handle(self, connection: socket.socket) -> None:
        with connection:
            head = _read_head(connection)
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = request_line.split()
            target = _target(parts[0], parts[1]) if len(parts) == 3 else None
            if target is None:
                connection.sendall(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
                return
            host, port = target
            if host.lower() not in self.allowed_hosts:
                self.denied.append(f"{host}:{port}")
                body = f"refactor-agent: {host} is not an allowed package index host\n".encode()
                connection.sendall(
                    b"HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: "
                    + str(len(body)).encode()
                    + b"\r\n\r\n"
                    + body
                )
                return
            try:
                outbound = self._open(parts[0], host, port, head, connection)
            except OSError as error:
                message = f"refactor-agent: cannot reach {host}:{port}: {error}\n".encode()
                connection.sendall(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n" + message)
                return
            with outbound:
                reverse = threading.Thread(target=_pipe, args=(outbound, connection), daemon=True)
                reverse.start()
                _pipe(connection, outbound)
                reverse.join()

    def _open(self, method: str, host: str, port: int, head: bytes, client: socket.socket) -> socket.socket:
        """The connection onward: straight to the host, or through the host's own proxy."""
        direct = any(host == entry or host.endswith(f".{entry}") for entry in self.no_proxy)
        if self.upstream is not None and self.upstream.hostname and not direct:
            outbound = socket.create_connection(
                (self.upstream.hostname, self.upstream.port or 80), timeout=CONNECT_TIMEOUT_S
            )
            outbound.settimeout(None)
            authorization = b""
            if self.upstream.username:
                secret = f"{unquote(self.upstream.username)}:{unquote(self.upstream.password or '')}"
                authorization = b"Proxy-Authorization: Basic " + base64.b64encode(secret.encode()) + b"\r\n"
            if method == "CONNECT":
                head = f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n".encode() + authorization + b"\r\n"
            else:
                line, _, rest = head.partition(b"\r\n")
                head = line + b"\r\n" + authorization + rest
            outbound.sendall(head)
            return outbound
        outbound = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        outbound.settimeout(None)
        if method == "CONNECT":
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            outbound.sendall(head)  # origin servers take the absolute form too (RFC 9112, 3.2.2)
        return outbound
