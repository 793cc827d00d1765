"""The repository as committed at HEAD (or another commit), read through git: the environment is built from what
the run works on, and no file of the working tree is opened or followed (a symlink in the tree is a blob like any
other)."""

from __future__ import annotations

import contextlib
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import git

from agent.worktree.safe_git import BlobReader, GitError, SafeGit
from agent.worktree.workspace import user_git

# Lock files of large projects run to a few megabytes; anything larger is not a dependency file we can use.
MAX_DEPENDENCY_FILE_BYTES = 16 * 1024 * 1024
REGULAR_FILE_MODES = ("100644", "100755")


class CommittedFileError(Exception):
    """str() is the one line the user sees."""


@dataclass(frozen=True)
class CommittedTree:
    git: SafeGit
    commit: str
    entries: dict[str, tuple[str, str]]  # path -> (mode, object id)
    blobs: BlobReader  # every file read, over one git process (committed_tree ends it)

    def has(self, path: str) -> bool:
        return path in self.entries

    def regular(self, path: str) -> bool:
        return self.entries.get(path, ("", ""))[0] in REGULAR_FILE_MODES

    def paths(self) -> list[str]:
        return sorted(self.entries)

    def read(self, path: str, max_bytes: int = MAX_DEPENDENCY_FILE_BYTES) -> bytes:
        """A regular committed file (not a symlink, not a submodule), at most `max_bytes`."""
        if not self.regular(path):
            raise CommittedFileError(f"{path} is not a regular file at {self.commit[:12]}")
        data = self.blobs.read(self.entries[path][1], max_bytes=max_bytes)
        if data is None:  # the tree lists the blob: it is there, and too large
            raise CommittedFileError(f"{path} is larger than {max_bytes // 1024} KiB")
        return data

    def text(self, path: str) -> str:
        return self.read(path).decode("utf-8", errors="replace")

    def nearest_tag(self) -> str | None:
        """The closest tag reachable from the commit (what a version-from-git build would start from), if any."""
        try:
            return self.git.run("describe", "--tags", "--abbrev=0", self.commit).decode().strip() or None
        except GitError:
            return None

    def tree_id(self, directory: str) -> str:
        """The git tree id of a directory: it changes exactly when something under it does. Only a directory of the
        tree is one: a path through a symbolic link (or a link itself) is refused, so nothing is read through it."""
        spec = f"{self.commit}:{directory}" if directory not in ("", ".") else f"{self.commit}^{{tree}}"
        try:
            object_id = self.git.run("rev-parse", "--verify", "--quiet", spec).decode().strip()
            kind = self.git.run("cat-file", "-t", object_id).decode().strip()
        except GitError:
            kind = "nothing"
        if kind != "tree":
            where = f"at {self.commit[:12]}"
            raise CommittedFileError(f"{directory} is not a directory of the repository {where}")
        return object_id

    def archive(self, directory: str = "") -> bytes:
        """A tar of the committed tree (or one directory of it), as git writes it from its objects."""
        spec = f"{self.commit}:{directory}" if directory not in ("", ".") else self.commit
        return self.git.run("archive", "--format=tar", spec)

    def snapshot(self, target: Path) -> None:
        """Extract the committed tree into `target`. Symbolic links stay links whatever they point at (absolute
        ones are common in real repositories); everything else passes tarfile's data filter, which refuses paths
        leading out of `target`, through a link too."""
        command = self.git.command("archive", "--format=tar", self.commit)
        with subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL) as process:
            assert process.stdout is not None
            try:
                with tarfile.open(fileobj=process.stdout, mode="r|") as archive:
                    archive.extractall(target, filter=_links_kept)
            except (tarfile.TarError, OSError) as error:
                process.kill()
                raise CommittedFileError(f"cannot copy the tree of {self.commit[:12]}: {error}") from None
            if process.wait() != 0:
                raise CommittedFileError(f"git archive of {self.commit[:12]} failed")


def _links_kept(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo | None:
    """tarfile's data filter, but a symbolic link keeps its target: the link's own path is checked as any other
    (inside `destination`), and the link is created, never followed here."""
    if not member.issym():
        return tarfile.data_filter(member, destination)
    checked = tarfile.data_filter(member.replace(linkname=".", deep=False), destination)
    return checked.replace(linkname=member.linkname, deep=False) if checked is not None else None


def _entries(safe: SafeGit, commit: str) -> dict[str, tuple[str, str]]:
    listing = safe.run("ls-tree", "-r", "-z", "--full-tree", commit)
    entries = {}
    for record in listing.decode("utf-8", errors="surrogateescape").split("\0"):
        if "\t" not in record:
            continue
        meta, path = record.split("\t", 1)
        mode, _kind, object_id = meta.split()
        entries[path] = (mode, object_id)
    return entries


@contextlib.contextmanager
def committed_tree(repo: git.Repo, revision: str = "HEAD") -> Iterator[CommittedTree]:
    """The tree of `revision` (HEAD: what a run works on; `review rebase` asks for the commit it rebases onto)."""
    with tempfile.TemporaryDirectory(prefix="refactor-agent-hooks-") as hooks:
        safe = user_git(repo, Path(hooks))
        blobs = BlobReader(safe)  # the commit is resolved over the process that reads the files too
        try:
            named = f"{revision}^{{commit}}"  # none: git's own error, as rev-parse words it
            commit = blobs.object_id(named) or safe.run("rev-parse", "--verify", "--end-of-options", named).decode()
            commit = commit.strip()
            yield CommittedTree(git=safe, commit=commit, entries=_entries(safe, commit), blobs=blobs)
        finally:
            blobs.close()
