"""The file tools' work, done INSIDE the sandbox: one JSON request on stdin, one JSON reply line on stdout.

tools/files.py sends this module's source to `python3 -I -c` in the task's container, so it must stay a single
standard-library-only file (no imports from this project). Whatever a path, a link, a pipe, a huge file or a
regular expression does, it does within the sandbox's limits and timeout; the host only reads the reply.

Paths are confined to the command's working directory (/workspace in the sandbox): `..` and `.git` are refused,
absolute paths must lie under it, and every component is opened relative to its parent's descriptor with
O_NOFOLLOW, so no symbolic link is ever followed, not even one that a running command swaps in mid-call.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import sys
from pathlib import PurePosixPath

# typing.TYPE_CHECKING without importing typing, a tenth of each file tool's start-up: the annotations (strings, as
# __future__ makes them) name Any for the type checkers alone.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Files the model views, edits or searches are read whole up to this size; larger ones are refused or skipped
# by their size before any byte is read (a 3 GB sparse file costs one fstat).
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_SEARCH_MATCHES = 200
SHOWN_LINE_CHARS = 300
BINARY_PROBE_BYTES = 8192
SKIPPED_NAMES_SHOWN = 10

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever; fstat then refuses it.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """A problem the model caused and can fix; its text is what the model reads."""


def _shown(parts: list[str] | tuple[str, ...]) -> str:
    """The path as the model reads it: relative to the workspace, undecodable bytes shown as U+FFFD."""
    text = "/".join(parts) or "."
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _parts(raw: str) -> list[str]:
    """The components of a model-written path (relative, or absolute under the workspace), or Refused."""
    text = raw.strip()
    if not text:
        raise Refused("empty path")
    path = PurePosixPath(text)
    if ".." in path.parts:
        raise Refused(f"'{raw}': '..' is not allowed; use a path inside the workspace")
    if path.is_absolute():
        root = PurePosixPath(os.getcwd())
        if path != root and root not in path.parents:
            raise Refused(f"'{raw}' is outside the workspace ({root})")
        path = path.relative_to(root)
    if ".git" in path.parts:
        raise Refused(f"'{raw}': the .git entry is managed by refactor-agent")
    return list(path.parts)


def _kind(mode: int) -> str:
    kinds = {
        stat.S_IFDIR: "a directory",
        stat.S_IFIFO: "a named pipe",
        stat.S_IFSOCK: "a socket",
        stat.S_IFCHR: "a device",
        stat.S_IFBLK: "a device",
        stat.S_IFREG: "a regular file",
    }
    return kinds.get(stat.S_IFMT(mode), "not a regular file")


def _not_followed(parent: int, name: str, shown: str) -> Refused:
    try:
        target = f" (to '{os.readlink(name, dir_fd=parent)}')"
    except OSError:  # no longer a link: a running command swaps it
        target = ""
    return Refused(f"'{shown}' is a symbolic link{target}; file tools never follow links")


def _refusal(parent: int, name: str, shown: str, error: OSError, *, folder: bool) -> Refused:
    """Why opening `name` in `parent` failed, in words; errors that are not the path's doing are raised."""
    try:
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            return _not_followed(parent, name, shown)
    except FileNotFoundError:
        return Refused(f"'{shown}' does not exist")
    if folder and not stat.S_ISDIR(mode):
        return Refused(f"'{shown}' is {_kind(mode)}, not a directory")
    if not folder and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return Refused(f"'{shown}' is {_kind(mode)}")
    if error.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.ENXIO):
        return Refused(f"'{shown}' changed while it was opened (a running command swapping it?); it was not followed")
    raise error


def _open_parent(parts: list[str], *, make_parents: bool = False) -> int:
    """A descriptor of the folder holding the last component (the workspace itself for the empty path)."""
    folder = os.open(".", DIR_FLAGS)
    try:
        for depth, name in enumerate(parts[:-1], start=1):
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=folder)
            except FileNotFoundError:
                if not make_parents:
                    raise Refused(f"'{_shown(parts[:depth])}' does not exist") from None
                with contextlib.suppress(FileExistsError):  # made meanwhile by a command: opened with the checks
                    os.mkdir(name, dir_fd=folder)
                child = os.open(name, DIR_FLAGS, dir_fd=folder)
            except OSError as error:
                raise _refusal(folder, name, _shown(parts[:depth]), error, folder=True) from None
            os.close(folder)
            folder = child
    except BaseException:
        os.close(folder)
        raise
    return folder


def _open(parts: list[str]) -> tuple[int, int, os.stat_result]:
    """(parent folder, the opened entry, its fstat) for an existing path, never through a link."""
    parent = _open_parent(parts)
    name = parts[-1] if parts else "."
    try:
        handle = os.open(name, READ_FLAGS, dir_fd=parent)
    except OSError as error:
        try:
            raise _refusal(parent, name, _shown(parts), error, folder=False) from None
        finally:
            os.close(parent)
    return parent, handle, os.fstat(handle)


def _too_large(shown: str, size: int) -> Refused:
    return Refused(
        f"'{shown}' is {size} bytes; file tools read at most {MAX_FILE_BYTES} bytes (look at parts with bash: "
        "head, sed -n, grep)"
    )


def _read_regular(handle: int, info: os.stat_result, shown: str) -> bytes:
    """The whole content of an opened regular file, refused by its size before reading when it is too large."""
    if stat.S_ISDIR(info.st_mode):
        raise Refused(f"'{shown}' is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise Refused(f"'{shown}' is {_kind(info.st_mode)}")
    if info.st_size > MAX_FILE_BYTES:
        raise _too_large(shown, info.st_size)
    chunks: list[bytes] = []
    total = 0
    while chunk := os.read(handle, 1 << 20):
        total += len(chunk)
        if total > MAX_FILE_BYTES:  # grew since fstat
            raise _too_large(shown, total)
        chunks.append(chunk)
    return b"".join(chunks)


def _read_text(handle: int, info: os.stat_result, shown: str) -> bytes:
    data = _read_regular(handle, info, shown)
    if b"\0" in data[:BINARY_PROBE_BYTES]:
        raise Refused(f"'{shown}' is a binary file")
    return data


def _replace(parent: int, name: str, data: bytes, mode: int | None) -> None:
    """Write through a new file in the same folder renamed over `name`: a link there is replaced, not followed."""
    # os.urandom, not secrets.token_hex (the same bytes): importing secrets (hmac, hashlib) was a sixth of each
    # file tool's start-up.
    temporary = f".refactor-agent-{os.urandom(6).hex()}.tmp"
    handle = os.open(temporary, WRITE_FLAGS, 0o666, dir_fd=parent)
    try:
        try:
            if mode is not None:
                os.fchmod(handle, stat.S_IMODE(mode))
            view = memoryview(data)
            while view:
                view = view[os.write(handle, view) :]
        finally:
            os.close(handle)
        os.rename(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=parent)
        raise


def view_file(request: dict[str, Any]) -> str:
    parts = _parts(request["path"])
    shown = _shown(parts)
    parent, handle, info = _open(parts)
    try:
        if stat.S_ISDIR(info.st_mode):
            with os.scandir(handle) as children:
                entries = sorted(
                    _shown([child.name]) + ("/" if child.is_dir(follow_symlinks=False) else "")
                    for child in children
                    if child.name != ".git"
                )
            return f"{shown}/ ({len(entries)} entries)\n" + "\n".join(entries)
        lines = _read_text(handle, info, shown).decode("utf-8", errors="replace").splitlines()
    finally:
        os.close(handle)
        os.close(parent)
    start = request.get("start_line") or 1
    end = min(request.get("end_line") or len(lines), len(lines))
    if start > max(len(lines), 1):
        raise Refused(f"'{shown}' has {len(lines)} lines; start_line {start} is past the end")
    if end < start:
        raise Refused(f"end_line {end} is before start_line {start}")
    width = len(str(end))
    body = "\n".join(f"{number:>{width}}  {lines[number - 1]}" for number in range(start, end + 1))
    return f"{shown} (lines {start}-{end} of {len(lines)})\n{body}"


def str_replace(request: dict[str, Any]) -> str:
    parts = _parts(request["path"])
    shown = _shown(parts)
    parent, handle, info = _open(parts)
    try:
        try:
            data = _read_text(handle, info, shown)
        finally:
            os.close(handle)
        if not request["old"]:
            raise Refused("old must not be empty")
        # Bytes, not decoded text: whatever else the file holds (invalid UTF-8, CRLF) is kept as it was.
        old, new = request["old"].encode("utf-8"), request["new"].encode("utf-8")
        occurrences = data.count(old)
        if occurrences != 1:
            raise Refused(
                f"old occurs {occurrences} times in '{shown}'; it must occur exactly once (add surrounding lines)"
            )
        _replace(parent, parts[-1], data.replace(old, new, 1), info.st_mode)
    finally:
        os.close(parent)
    line = data[: data.index(old)].count(b"\n") + 1
    return f"replaced 1 occurrence in '{shown}' at line {line}"


def create_file(request: dict[str, Any]) -> str:
    parts = _parts(request["path"])
    shown = _shown(parts)
    if not parts:
        raise Refused(f"'{shown}' is a directory")
    content: str = request["content"]
    data = content.encode("utf-8")
    parent = _open_parent(parts, make_parents=True)
    try:
        try:
            mode: int | None = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and stat.S_ISLNK(mode):
            raise _not_followed(parent, parts[-1], shown)
        if mode is not None and not stat.S_ISREG(mode):
            raise Refused(f"'{shown}' is {_kind(mode)}")
        _replace(parent, parts[-1], data, mode)
    finally:
        os.close(parent)
    return f"{'overwrote' if mode is not None else 'created'} '{shown}' ({len(content.splitlines())} lines)"


def _candidate_files(scope: list[str]) -> list[str]:
    """Tracked plus untracked-but-not-ignored files, as git sees them, so build output is not searched."""
    # lazy: only search starts a process; the other file tools' start-up skips subprocess's import.
    import subprocess

    pathspec = ["/".join(scope) or "."]
    listing = subprocess.run(
        # Literal pathspecs: a folder named like ":(exclude)x" is a folder, not pathspec magic.
        ["git", "--literal-pathspecs", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *pathspec],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if listing.returncode != 0:
        reason = listing.stderr.decode("utf-8", "replace").strip().splitlines() or [f"exit {listing.returncode}"]
        raise Refused(f"search cannot list the repository's files (git ls-files: {reason[0]})")
    names = listing.stdout.decode("utf-8", errors="surrogateescape").split("\0")
    return sorted({name for name in names if name})


def _searchable(name: str, oversized: list[str]) -> bytes | None:
    """The file's bytes when it is a regular text file within the size cap; links and the like are skipped."""
    parts = name.split("/")
    if ".git" in parts:
        return None
    try:
        parent, handle, info = _open(parts)
    except (Refused, OSError):
        return None
    try:
        if not stat.S_ISREG(info.st_mode):
            return None
        try:
            data = _read_regular(handle, info, name)
        except Refused:
            oversized.append(_shown(parts))
            return None
    finally:
        os.close(handle)
        os.close(parent)
    return None if b"\0" in data[:BINARY_PROBE_BYTES] else data


def search(request: dict[str, Any]) -> str:
    try:
        regex = re.compile(request["pattern"])
    except re.error as error:
        raise Refused(f"invalid regular expression: {error}") from error
    scope = _parts(request["path"]) if request.get("path") else []
    if scope:  # the scope itself is opened like any path, so a link or a missing folder is named as such
        parent, handle, info = _open(scope)
        os.close(handle)
        os.close(parent)
        if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
            raise Refused(f"'{_shown(scope)}' is {_kind(info.st_mode)}")
    matches: list[str] = []
    oversized: list[str] = []
    total = 0
    for name in _candidate_files(scope):
        data = _searchable(name, oversized)
        if data is None:
            continue
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
            if regex.search(line):
                total += 1
                if len(matches) < MAX_SEARCH_MATCHES:
                    matches.append(f"{_shown(name.split('/'))}:{number}: {line.strip()[:SHOWN_LINE_CHARS]}")
    if not matches:
        matches.append(f"no matches for /{request['pattern']}/")
    elif total > len(matches):
        matches.append(f"[{total - len(matches)} more matches not shown; narrow the pattern or path]")
    if oversized:
        named = ", ".join(oversized[:SKIPPED_NAMES_SHOWN]) + (", ..." if len(oversized) > SKIPPED_NAMES_SHOWN else "")
        matches.append(f"[{len(oversized)} files over {MAX_FILE_BYTES} bytes not searched: {named}]")
    return "\n".join(matches)


OPERATIONS = {"view_file": view_file, "str_replace": str_replace, "create_file": create_file, "search": search}


def serve(operations: dict[str, Any], operation: str) -> None:
    """Read the request, run its operation, write the one reply line (symbols_helper.py serves alike)."""
    try:
        request = json.loads(sys.stdin.buffer.read())
        operation = request["op"]
        reply = {"text": operations[operation](request)}
    except Refused as error:
        reply = {"error": str(error)}
    except Exception as error:  # reported, not raised: the host reads one reply line whatever happened
        reply = {"error": f"{operation} failed: {error.__class__.__name__}: {error}"}
    # Lone surrogates (from undecodable names or the model's JSON) become '?': the line stays valid UTF-8 JSON.
    sys.stdout.buffer.write(json.dumps(reply, ensure_ascii=False).encode("utf-8", "replace") + b"\n")


def main() -> None:
    serve(OPERATIONS, "file tool")


if __name__ == "__main__":
    main()
