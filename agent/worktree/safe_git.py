"""Host-side git that trusts nothing a task's worktree holds; workspace.py runs all its git through it.

The model can rewrite anything in its worktree, the `.git` file included (point it at the user's git dir, or at a
git dir of its own whose config sets core.fsmonitor or core.hooksPath), and the user's own hooks would run on
the model's content. So every call names the git dir and the work tree on the command line (git never reads
the worktree's `.git` to find them), points core.hooksPath at an empty directory of ours, turns core.fsmonitor
off, takes no optional locks (nothing is written that the command does not have to write), and drops the
caller's GIT_* variables, which could name other directories or carry config. Config then comes only from the
user's repository, global and system files, which the model cannot write (the sandbox mounts `.git` read-only).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

# Kept: who commits are attributed to, and which of the user's own config files git reads. Every other GIT_*
# variable is dropped (GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE, GIT_CONFIG_PARAMETERS ...).
KEPT_VARIABLES = (
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
)
READ_CHUNK_BYTES = 1024 * 1024
# What `cat-file --batch-command` answers for an object it has: "<id> <type> <size>".
_OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_OBJECT_HEADER = re.compile(rb"(?P<id>[0-9a-f]{40}|[0-9a-f]{64}) (?P<type>[a-z]+) (?P<size>[0-9]+)")


class GitError(Exception):
    """A git command failed; str() is the command and git's last line."""


@dataclass(frozen=True)
class CappedOutput:
    data: bytes  # at most the cap asked for, cut at a line end
    total_bytes: int  # everything git wrote


def _environment(extra: dict[str, str] | None) -> dict[str, str]:
    kept = {key: value for key, value in os.environ.items() if not key.startswith("GIT_") or key in KEPT_VARIABLES}
    return {**kept, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", **(extra or {})}


@dataclass(frozen=True)
class SafeGit:
    git_dir: Path
    work_tree: Path
    hooks_dir: Path  # empty and outside every worktree, so no hook of anyone's runs

    def command(self, *args: str) -> list[str]:
        return [
            "git",
            f"--git-dir={self.git_dir}",
            f"--work-tree={self.work_tree}",
            "-c",
            f"core.hooksPath={self.hooks_dir}",
            "-c",
            "core.fsmonitor=false",
            *args,
        ]

    def environment(self) -> dict[str, str]:
        """The environment its commands run with (for a caller that starts git itself, as the packer does)."""
        return _environment(None)

    def run(
        self, *args: str, input: bytes | None = None, env: dict[str, str] | None = None, timeout: float | None = None
    ) -> bytes:
        """stdout of a git command that must succeed; `timeout`: seconds, then it is killed (a GitError)."""
        return self.run_status(*args, input=input, env=env, timeout=timeout, allowed=(0,))[1]

    def run_status(
        self,
        *args: str,
        allowed: tuple[int, ...],
        input: bytes | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> tuple[int, bytes]:
        """A git command whose exit code is an answer (merge-tree: 1 is "conflicts"): (code, stdout) for the
        `allowed` codes, a GitError for any other."""
        try:
            completed = subprocess.run(
                self.command(*args),
                cwd=self.work_tree,
                input=input,
                stdin=None if input is not None else subprocess.DEVNULL,
                capture_output=True,
                env=_environment(env),
                check=False,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise GitError(_failure(args, f"no answer in {timeout:g} s".encode())) from None
        if completed.returncode not in allowed:
            raise GitError(_failure(args, completed.stderr))
        return completed.returncode, completed.stdout

    def read_capped(self, *args: str, max_bytes: int) -> CappedOutput:
        """stdout of a command that may print gigabytes: the first max_bytes are kept, the rest only counted."""
        with tempfile.TemporaryFile() as errors:
            process = self._reading(args, errors)
            assert process.stdout is not None
            kept = bytearray()
            total = 0
            with process.stdout:
                while chunk := process.stdout.read(READ_CHUNK_BYTES):
                    total += len(chunk)
                    if len(kept) <= max_bytes:
                        kept += chunk[: max_bytes + 1 - len(kept)]
            if process.wait() != 0:
                errors.seek(0)
                raise GitError(_failure(args, errors.read(64 * 1024)))
        if total <= max_bytes:
            return CappedOutput(bytes(kept), total)
        cut = kept.rfind(b"\n", 0, max_bytes) + 1
        return CappedOutput(bytes(kept[:cut]), total)

    def read_within(self, *args: str, max_bytes: int) -> bytes | None:
        """stdout of a command that must succeed, or None when it is longer than max_bytes: git is stopped there,
        the rest is never read (a blob of gigabytes costs what max_bytes does)."""
        with tempfile.TemporaryFile() as errors:
            process = self._reading(args, errors)
            assert process.stdout is not None
            with process.stdout:
                data = process.stdout.read(max_bytes + 1)
                if len(data) > max_bytes:
                    process.kill()
                    process.wait()
                    return None
            if process.wait() != 0:
                errors.seek(0)
                raise GitError(_failure(args, errors.read(64 * 1024)))
        return data

    def object_ids(self, names: Sequence[str]) -> list[str | None]:
        """The object each of `names` resolves to (`<commit>^{tree}` peeled, ...), None for one that does not, or that
        is no one line of the batch's input: one `cat-file --batch-check` for them all."""
        asked = [name for name in names if "\n" not in name]
        batch = "".join(f"{name}\n" for name in asked).encode()
        lines = self.run("cat-file", "--batch-check=%(objectname)", input=batch).decode().splitlines() if asked else []
        found = {name: line for name, line in zip(asked, lines, strict=True) if _OBJECT_ID.fullmatch(line)}
        return [found.get(name) for name in names]

    def _reading(self, args: tuple[str, ...], errors: IO[bytes]) -> subprocess.Popen[bytes]:
        """A git command whose stdout is read as it comes (a pipe), its stderr kept in `errors`."""
        return subprocess.Popen(
            self.command(*args),
            cwd=self.work_tree,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errors,
            env=_environment(None),
        )


class BlobReader:
    """Blobs read as read_within reads `cat-file blob <spec>`, over one `cat-file --batch-command` process (started at
    the first read, ended by close()), asked for a blob's contents only once its size is known to be within the cap:
    a blob of gigabytes costs what a missing one does. The process reads the index once: keep a reader of `:<path>`
    specs no longer than one staging."""

    def __init__(self, git: SafeGit) -> None:
        self._git = git
        self._batch: subprocess.Popen[bytes] | None = None

    def read(self, spec: str, *, max_bytes: int) -> bytes | None:
        """The blob `spec` names; None when it names no blob, or one larger than max_bytes."""
        if "\n" in spec or "\r" in spec:  # not one line of the batch's input: a process of its own
            try:  # one git process, whether the blob is there, too large or small enough
                return self._git.read_within("cat-file", "blob", spec, max_bytes=max_bytes)
            except GitError:
                return None
        try:
            return _batch_blob(self._started(), spec, max_bytes)
        except _BatchGone:  # git gave up on this name (`HEAD:../x` dies, as `cat-file blob` does): next one anew
            self.close()
            return None

    def object_id(self, name: str) -> str | None:
        """The object `name` resolves to (`<rev>^{commit}` peeled, as rev-parse --verify resolves it), over the same
        process; None when it names none, or is no one line of the batch's input."""
        if "\n" in name or "\r" in name:
            return None
        try:
            found = _OBJECT_HEADER.fullmatch(_ask(self._started(), b"info " + os.fsencode(name)))
        except _BatchGone:
            self.close()
            return None
        return found["id"].decode() if found is not None else None

    def _started(self) -> subprocess.Popen[bytes]:
        self._batch = self._batch or subprocess.Popen(
            self._git.command("cat-file", "--batch-command"),
            cwd=self._git.work_tree,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_environment(None),
        )
        return self._batch

    def close(self) -> None:
        if self._batch is not None:
            _stop(self._batch)
            self._batch = None


class _BatchGone(Exception):
    """The batch process ended or answered out of turn."""


def _ask(batch: subprocess.Popen[bytes], command: bytes) -> bytes:
    """One command to `cat-file --batch-command` (flushed: git answers each before reading the next) and the
    header line of its answer."""
    assert batch.stdin is not None and batch.stdout is not None
    try:
        batch.stdin.write(command + b"\n")
        batch.stdin.flush()
    except OSError:
        raise _BatchGone from None
    line = batch.stdout.readline()
    if not line.endswith(b"\n"):
        raise _BatchGone
    return line[:-1]


def _batch_blob(batch: subprocess.Popen[bytes], spec: str, max_bytes: int) -> bytes | None:
    assert batch.stdout is not None
    name = os.fsencode(spec)
    header = _ask(batch, b"info " + name)
    if header == name + b" missing" or header == name + b" ambiguous":
        return None
    found = _OBJECT_HEADER.fullmatch(header)
    if found is None:
        raise _BatchGone
    if found["type"] != b"blob" or int(found["size"]) > max_bytes:
        return None
    if _ask(batch, b"contents " + found["id"]) != header:
        raise _BatchGone
    size = int(found["size"])
    data = batch.stdout.read(size + 1)  # the blob, then the line end git puts after it
    if len(data) != size + 1:
        raise _BatchGone
    return data[:size]


def _stop(batch: subprocess.Popen[bytes]) -> None:
    """End the batch: git exits at the end of its input (or on the closed pipe, mid-answer)."""
    for pipe in (batch.stdin, batch.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):  # a write still buffered for a process that is gone
                pipe.close()
    batch.wait()


def _failure(args: tuple[str, ...], stderr: bytes) -> str:
    lines = stderr.decode("utf-8", errors="replace").strip().splitlines()
    subcommand = next((arg for arg in args if not arg.startswith("-") and "=" not in arg), "")
    return f"git {subcommand} failed: {lines[-1] if lines else 'no message'}"
