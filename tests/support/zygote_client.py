"""`python3 -m pytest ...` of a local sandbox, as a client of the session's pytest zygote (support/pytest_zygote.py):
it sends its argv, working directory, environment and open file descriptors, and ends as the forked run ends, with
its exit status or its signal. Where the zygote cannot be reached or declines, the interpreter starts instead.

Run as `python -I -S zygote_client.py SOCKET WRAPPER MARK PYTHON -m pytest ...`: where the zygote declines, it execs
`WRAPPER MARK -m pytest ...` (the sandbox's python3, which then prepares the interpreter's start and execs PYTHON).
Its start-up is most of its cost, so it imports nothing beyond the interpreter's built-in modules (socket.py and
signal.py import enum, a third of a start-up); where a C compiler is there, zygote_client.c does the same without
an interpreter's start (support/local_sandbox.py picks)."""

import _signal
import _socket
import os
import sys

# The zygote's replies: run it yourself, the forked run's pid, its exit (status, and whether its process group
# outlived it).
EXEC, STARTED, EXITED = b"E", b"P", b"X"
TERMINATING = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT)


def _receive(connection: _socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            return data
        data += chunk
    return data


def _open_descriptors() -> list[int]:
    """The descriptors this process was started with: the listing's own is closed again when fstat looks."""
    descriptors = []
    for name in os.listdir("/proc/self/fd"):
        try:
            os.fstat(int(name))
        except OSError:
            continue
        descriptors.append(int(name))
    return sorted(descriptors)


def _request(socket_path: str, command: list[str]) -> _socket.socket | None:
    """The connection once the zygote forked the run; None when it declined or is not there."""
    descriptors = _open_descriptors()
    if len(descriptors) > 250:  # one message carries at most 253
        return None
    environment = [key + b"=" + value for key, value in os.environb.items()]
    numbers = b" ".join(str(fd).encode() for fd in descriptors)
    count = str(len(command)).encode()
    payload = b"\0".join([numbers, os.fsencode(os.getcwd()), count, *map(os.fsencode, command), *environment])
    connection = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        connection.connect(socket_path)
        rights = b"".join(fd.to_bytes(4, sys.byteorder) for fd in descriptors)
        header = len(payload).to_bytes(8, "little")
        connection.sendmsg([header], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
        connection.sendall(payload)
        if connection.recv(1) == STARTED:
            return connection
    except OSError:
        pass
    connection.close()
    return None


def _stand_in(connection: _socket.socket) -> None:
    """What the run left running outlived it: a process in the command's group holds the connection until the
    zygote closes it (that group emptied), so that killing the command's group (a timeout, the sandbox closing)
    still kills what is left of the run, as it would have killed the interpreter's children."""
    if os.fork() != 0:
        return
    os.closerange(0, connection.fileno())
    os.closerange(connection.fileno() + 1, 65536)
    while connection.recv(64):
        pass
    os._exit(0)


def _exit_as(code: int) -> None:
    if code < 0:  # killed by a signal: so is this process, for the shell to see the same
        if -code not in (_signal.SIGKILL, _signal.SIGSTOP):
            _signal.signal(-code, _signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code
    os._exit(code)


def main() -> None:
    socket_path, wrapper, mark, python, *arguments = sys.argv[1:]
    connection = _request(socket_path, [python, *arguments])
    if connection is None:
        os.execv(wrapper, [wrapper, mark, *arguments])
    started = _receive(connection, 4)
    pid = int.from_bytes(started, "little")

    def forward(number: int, frame: object) -> None:
        try:  # noqa: SIM105 - contextlib is not imported here
            os.kill(pid, number)
        except OSError:
            pass

    for number in TERMINATING:  # a signal for the interpreter reaches the run instead (one ignored stays so)
        if _signal.getsignal(number) != _signal.SIG_IGN:
            _signal.signal(number, forward)
    reply = _receive(connection, 6)
    if len(started) < 4 or len(reply) < 6 or reply[:1] != EXITED:  # the zygote died: nothing else would end the run
        for number in TERMINATING:
            _signal.signal(number, _signal.SIG_DFL)
        if len(started) == 4:
            forward(_signal.SIGKILL, None)
            try:  # noqa: SIM105
                os.killpg(pid, _signal.SIGKILL)
            except OSError:
                pass
        os.write(2, b"pytest zygote: the connection broke before the run ended\n")
        os._exit(1)
    if reply[5:6] == b"1":
        _stand_in(connection)
    _exit_as(int.from_bytes(reply[1:5], "little", signed=True))


main()
