"""The build's only way out: an HTTP CONNECT proxy on the host that lets through the configured package indexes
(each host on its own port: 443 or 80, or the port its URL names) and refuses everything else, naming what was
tried.

The build container has no network (`network_mode=none`, only its own loopback). A small forwarder inside it
(FORWARDER, run with the image's python3) listens on its loopback and relays each connection through a unix
socket, bind-mounted from the host, to this proxy; the build's commands find it through HTTP(S)_PROXY. The
proxy reads one request head, checks the host and port against the allowed endpoints, and then only relays bytes
(TLS goes end to end: nothing is decrypted). When the host itself goes through a proxy, connections are chained
to it. A client that sends no request head in time, or a tunnel silent both ways for too long, is dropped; each
refused, failed or dropped connection is one line to `log`, never a traceback.
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

from sandbox.errors import one_line

FORWARDER_PORT = 3128
HEAD_LIMIT_BYTES = 64 * 1024
CONNECT_TIMEOUT_S = 30
# A build's client sends its request head at once; one that does not is holding a thread for nothing.
HEAD_TIMEOUT_S = 30
# A download may pause while the index thinks; five minutes with no byte either way is a dead connection.
IDLE_TIMEOUT_S = 300
DEFAULT_PORTS = {"https": 443, "http": 80}
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


Endpoint = tuple[str, int]
Log = Callable[[str], None]


def url_endpoint(url: str) -> Endpoint | None:
    """(host, port) of a remote index URL; None for a local one (`file:`, a path)."""
    address = urlsplit(url)
    if not address.hostname or address.scheme not in DEFAULT_PORTS:
        return None
    return address.hostname.lower(), address.port or DEFAULT_PORTS[address.scheme]


def host_endpoints(entry: str) -> set[Endpoint]:
    """An allowed host as a user or detection names it: `host:port`, or a bare host on 443 and 80."""
    host, _, port = entry.lower().rpartition(":")
    if host and port.isdigit():
        return {(host.strip("[]"), int(port))}
    return {(entry.lower(), port) for port in DEFAULT_PORTS.values()}


def describe_endpoints(endpoints: set[Endpoint]) -> str:
    return ", ".join(f"{host}:{port}" for host, port in sorted(endpoints)) or "none"


class _Tunnel:
    """Bytes both ways until either side closes or neither has sent anything for `idle_s`."""

    def __init__(self, client: socket.socket, outbound: socket.socket, idle_s: float) -> None:
        self.idle_s = idle_s
        self.last_activity = time.monotonic()
        for end in (client, outbound):
            # A wake-up now and then to look at the other direction: one side may be quiet while the other streams.
            end.settimeout(min(idle_s, 5.0))
        reverse = threading.Thread(target=self._pipe, args=(outbound, client), daemon=True)
        reverse.start()
        self._pipe(client, outbound)
        reverse.join()

    def _pipe(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                try:
                    data = source.recv(65536)
                except TimeoutError:
                    if time.monotonic() - self.last_activity > self.idle_s:
                        break
                    continue
                if not data:
                    break
                self.last_activity = time.monotonic()
                target.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                target.shutdown(socket.SHUT_WR)


def _read_head(connection: socket.socket, timeout_s: float) -> bytes:
    """The request head, within `timeout_s` in all (a byte now and then does not keep a client on)."""
    deadline = time.monotonic() + timeout_s
    head = b""
    while b"\r\n\r\n" not in head and len(head) < HEAD_LIMIT_BYTES:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        connection.settimeout(left)
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
        self,
        socket_path: Path,
        allowed: set[Endpoint],
        upstream: str | None = None,
        no_proxy: str = "",
        *,
        log: Log = lambda _: None,
        head_timeout_s: float = HEAD_TIMEOUT_S,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ) -> None:
        self.socket_path = socket_path
        self.allowed = {(host.lower(), port) for host, port in allowed}
        self.upstream = urlsplit(upstream) if upstream else None
        self.no_proxy = [entry.strip().lstrip(".").lower() for entry in no_proxy.split(",") if entry.strip()]
        self.log = log
        self.head_timeout_s = head_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.denied: list[str] = []
        self._server = socket.socket(socket.AF_UNIX)
        # A scratch directory under a long TMPDIR exceeds AF_UNIX's 108 bytes: bind through its directory's fd.
        directory = os.open(socket_path.parent, os.O_PATH | os.O_DIRECTORY)
        try:
            self._server.bind(f"/proc/self/fd/{directory}/{socket_path.name}")
        finally:
            os.close(directory)
        self._server.listen(64)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        # Connections in flight, ended when the build ends: uv may still hold some (DNS slow to answer on a loaded
        # machine), and their handlers must not go on into a build that is over.
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def __enter__(self) -> EgressProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        self._thread.join(5)
        with self._connections_lock:
            for connection in self._connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)

    def _say(self, line: str) -> None:
        """A line for the build's log while the build lasts; once it is over, its log is closed and nobody reads."""
        if not self._closed.is_set():
            self.log(line)

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(connection,), daemon=True).start()

    def _handle(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.add(connection)
        with connection:
            try:
                self._serve_one(connection)
            except Exception as error:  # one connection's fault (a reset, a bad head): a line, never a traceback
                self._say(f"egress: a connection failed: {one_line(error)}")
            finally:
                with self._connections_lock:
                    self._connections.discard(connection)

    def _serve_one(self, connection: socket.socket) -> None:
        try:
            head = _read_head(connection, self.head_timeout_s)
        except TimeoutError:
            self._say(f"egress: dropped a connection that sent no request within {self.head_timeout_s:g}s")
            return
        if not head or self._closed.is_set():
            return  # closed before a word (the forwarder's readiness probe, a client that gave up), or the build ended
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        target = _target(parts[0], parts[1]) if len(parts) == 3 else None
        if target is None:
            self._say(f"egress: refused a request that is not a proxy request: {request_line[:120]!r}")
            connection.sendall(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
            return
        host, port = target
        if (host.lower(), port) not in self.allowed:
            self.denied.append(f"{host}:{port}")
            self._say(f"egress: refused {host}:{port}: not an allowed package index (host and port)")
            body = f"refactor-agent: {host}:{port} is not an allowed package index host and port\n".encode()
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
            self._say(f"egress: cannot reach {host}:{port}: {one_line(error)}")
            message = f"refactor-agent: cannot reach {host}:{port}: {error}\n".encode()
            connection.sendall(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n" + message)
            return
        with outbound:
            _Tunnel(connection, outbound, self.idle_timeout_s)

    def _open(self, method: str, host: str, port: int, head: bytes, client: socket.socket) -> socket.socket:
        """The connection onward: straight to the host, or through the host's own proxy."""
        direct = any(host == entry or host.endswith(f".{entry}") for entry in self.no_proxy)
        if self.upstream is not None and self.upstream.hostname and not direct:
            outbound = socket.create_connection(
                (self.upstream.hostname, self.upstream.port or 80), timeout=CONNECT_TIMEOUT_S
            )
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
        if method == "CONNECT":
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            outbound.sendall(head)  # origin servers take the absolute form too (RFC 9112, 3.2.2)
        return outbound
