"""Real git repositories for tests, a model's tool calls that break the sample and repair it, and a byte-level
fingerprint of a user's checkout."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import secrets
import shutil
import stat
import struct
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from support.scripted_server import Reply

SAMPLE_FILES = {
    "pkg/__init__.py": "",
    "pkg/geometry.py": (
        'def compute_area(width, height):\n    """Area of a rectangle."""\n    return width * height\n'
    ),
    "pkg/report.py": (
        "from pkg.geometry import compute_area\n\n\n"
        "def describe(width, height):\n"
        '    return f"area={compute_area(width, height)}"\n'
    ),
    "tests/test_geometry.py": (
        "from pkg.geometry import compute_area\nfrom pkg.report import describe\n\n\n"
        "def test_area():\n    assert compute_area(2, 3) == 6\n\n\n"
        "def test_describe():\n    assert describe(2, 3) == 'area=6'\n"
    ),
    "pytest.ini": "[pytest]\naddopts = -p no:cacheprovider\n",
}

# The sample's area turned into a sum (its two tests regress), and the tool call that repairs it.
BROKEN_GEOMETRY = '''def compute_area(width, height):
    """Area of a rectangle."""
    return width + height


def perimeter(width, height):
    return 2 * (width + height)
'''
BREAK = Reply(tool_calls=[("create_file", {"path": "pkg/geometry.py", "content": BROKEN_GEOMETRY})])
REPAIR = Reply(
    tool_calls=[("str_replace", {"path": "pkg/geometry.py", "old": "width + height\n\n", "new": "width * height\n\n"})]
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def read_only_git(repo: Path, *args: str) -> str:
    """git that writes nothing it need not: `status` would otherwise refresh the very index being compared."""
    environment = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=environment).stdout


# Each set of files is committed once per session, into a template that make_repo copies (five git processes and
# a commit's housekeeping, for each of the hundreds of repositories the tests make, were a tenth of the fast tier).
_TEMPLATES: dict[tuple[object, ...], Path] = {}
_TEMPLATE_ROOT: list[Path] = []
_TEMPLATE_PARENT = Path(tempfile.gettempdir())  # as the session starts: some tests point tempfile at their scratch


def make_repo(path: Path, files: dict[str, str] = SAMPLE_FILES) -> Path:
    """A repository at `path` on branch main, `files` in its one commit ("initial", by Dev <dev@example.com>)."""
    if path.exists() and any(path.iterdir()):
        return _commit_repo(path, files)  # what is there already goes into the commit too
    return copy_of_template(("make_repo", *sorted(files.items())), path, lambda template: _packed(template, files))


def copy_of_template(key: tuple[object, ...], path: Path, build: Callable[[Path], object]) -> Path:
    """A copy at `path` (new or empty) of the repository `build` made at a path of its own, once per `key` and
    session."""
    template = _TEMPLATES.get(key)
    if template is None:
        # A folder of its own: a build may make (copy) a template of its own first.
        template = _session_folder() / "repo"
        build(template)
        _TEMPLATES[key] = template
    _copy(template, path, path)
    return path


def _session_folder() -> Path:
    """A new folder of the session's own (removed as it ends), for a template or a state made once."""
    return _new_folder(session_root(), "")


def session_root() -> Path:
    """Where the session's templates and states made once are (made at the first call, removed as the session
    ends): the session's process makes it before it forks one that makes templates or states there too."""
    if not _TEMPLATE_ROOT:
        _TEMPLATE_ROOT.append(_new_folder(_TEMPLATE_PARENT, "repo-templates-"))
        atexit.register(shutil.rmtree, _TEMPLATE_ROOT[0], ignore_errors=True)
    return _TEMPLATE_ROOT[0]


def _new_folder(parent: Path, prefix: str) -> Path:
    """mkdtemp's folder with a name of hex digits: a state's paths are shown in its reports, and report.md escapes
    an underscore at a name's end (mkdtemp's names hold underscores), which a test comparing the path would not."""
    while True:
        folder = parent / f"{prefix}{secrets.token_hex(6)}"
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
            return folder


# States made once per session (a first night, a killed run), each at a root of its own and kept as a copy: the
# runs, the record and git name the root's absolute paths, so each test gets the state back in that place, not in
# its tmp_path.
_MADE: dict[object, tuple[object, Path, Path]] = {}  # what make returned, its root, the copy
Made = TypeVar("Made")


def made_once(key: object, make: Callable[[Path], Made], repo: Callable[[Made], Path]) -> Made:
    """What `make` returns and leaves at the root it is given (an empty folder), made once per `key` and session;
    each later call puts the root back as `make` left it, whatever an earlier test did to it since, and returns
    what `make` returned. `repo`: the repository under the root, of what `make` returned."""
    return once_made(key, lambda: made_at_a_root(make), repo)


def made_at_a_root(make: Callable[[Path], Made]) -> tuple[Made, Path, Path]:
    """What `make` returns and leaves at a new root of the session's, the root, and a copy of it to put back."""
    root = _session_folder()
    made = make(root)
    snapshot = root.with_name(f"{root.name}-as-left")
    shutil.copytree(root, snapshot, symlinks=True)
    return made, root, snapshot


def once_made(key: object, at_a_root: Callable[[], tuple[Made, Path, Path]], repo: Callable[[Made], Path]) -> Made:
    """made_once of the state `at_a_root` makes (made_at_a_root's three, wherever it ran: in the background's
    process, support/background.py)."""
    if key in _MADE:
        made, root, snapshot = _MADE[key]
        put_back(snapshot, root, repo(made))  # type: ignore[arg-type]
        return made  # type: ignore[return-value]
    made, root, snapshot = at_a_root()
    _MADE[key] = made, root, snapshot
    return made


def put_back(snapshot: Path, place: Path, repo: Path) -> None:
    """`place` as `snapshot`, a copy of it, holds it: a state made once, at `place` (its runs, records and git's
    worktrees name its absolute paths), for each test that starts from it; `repo` is the repository in it."""
    shutil.rmtree(place)
    _copy(snapshot, place, repo)


def _copy(source: Path, path: Path, repo: Path) -> None:
    """`source` copied to `path`, links as links, times kept (a test's old files stay old)."""
    shutil.copytree(source, path, symlinks=True, dirs_exist_ok=True)
    # The copies' inodes and change times are not those the index recorded: refreshed now, as a fresh commit's
    # index is, so that the first `git status` of a run (or of a test comparing the index's bytes) has no work.
    if not _refreshed(repo / ".git" / "index", repo):
        git(repo, "update-index", "-q", "--refresh")


_ENTRY = struct.Struct(">10I20sH")  # an index entry's stat data, mode among them, its object id and flags
_BLOB, _LINK = 0o100000, 0o120000


def _refreshed(index: Path, worktree: Path) -> bool:
    """`git update-index -q --refresh` for a copy (a process per copy, 387 of them in the fast tier): each entry
    whose file holds the object and mode it records gets that file's stat data, the checksum is made again, and
    the index written as git writes it (index.lock, renamed). False, with nothing written, where git must judge
    (a version other than 2, a flag beyond the name's length, an entry other than a file or link, a file that
    differs: git keeps its old data, and a filter of .gitattributes may make it the same)."""
    if not index.exists():
        return False
    data = index.read_bytes()
    signature, version, count = struct.unpack_from(">4sII", data)
    if signature != b"DIRC" or version != 2:
        return False
    out, offset = [data[:12]], 12
    for _ in range(count):
        *_, mode, _uid, _gid, _size, object_id, flags = _ENTRY.unpack_from(data, offset)
        end = data.index(b"\0", offset + _ENTRY.size)
        name = data[offset + _ENTRY.size : end]
        length = (end - offset + 8) & ~7  # the name's NUL and the padding to 8 bytes
        if flags & 0xF000 or mode not in (_BLOB | 0o644, _BLOB | 0o755, _LINK):
            return False
        file = worktree / os.fsdecode(name)
        status = file.lstat()
        if mode == _LINK:
            same = stat.S_ISLNK(status.st_mode) and _blob_id(os.fsencode(os.readlink(file))) == object_id
        else:
            executable = 0o755 if status.st_mode & 0o100 else 0o644
            same = (
                stat.S_ISREG(status.st_mode) and mode == _BLOB | executable and _blob_id(file.read_bytes()) == object_id
            )
        if not same:
            return False
        times = (status.st_ctime_ns, status.st_mtime_ns)
        stat_data = [part for ns in times for part in divmod(ns, 10**9)]
        identity = (status.st_dev, status.st_ino, mode, status.st_uid, status.st_gid, status.st_size)
        fields = [value & 0xFFFFFFFF for value in (*stat_data, *identity)]
        out.append(_ENTRY.pack(*fields, object_id, flags) + data[offset + _ENTRY.size : offset + length])
        offset += length
    out.append(data[offset:-20])  # the extensions (the cache tree): what a refresh of stat data leaves as it is
    body = b"".join(out)
    lock = index.with_name("index.lock")
    lock.write_bytes(body + hashlib.sha1(body).digest())
    lock.replace(index)
    return True


def _blob_id(content: bytes) -> bytes:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).digest()


def _packed(template: Path, files: dict[str, str]) -> None:
    """The template's commit, its objects in one pack: each copy then holds a pack and its index where the loose
    objects took a file and a folder each (a sixth of what a session's tmp_path clean-up removed)."""
    _commit_repo(template, files)
    git(template, "repack", "-a", "-d", "-q")


def _commit_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "dev@example.com")
    git(path, "config", "user.name", "Dev")
    for name, content in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


def restore_checkout(repo: Path) -> None:
    """Back to the committed files: everything but .git removed (links as links), then checked out again."""
    for entry in repo.iterdir():
        if entry.name == ".git":
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=repo, check=True)


def refs_of(repo: Path) -> dict[str, str]:
    """Every ref of the checkout `repo`, by name, and what it holds (an object id, or `ref: ` and the ref a symbolic
    one names), read as git reads them: each loose ref file over its line of packed-refs (a `git pack-refs`
    changes nothing here). A git process fewer each time, where a test reads them all."""
    found: dict[str, str] = {}
    packed = repo / ".git" / "packed-refs"
    for line in packed.read_text().splitlines() if packed.exists() else []:
        if line[:1] not in ("#", "^"):  # the header; the commit an annotated tag above peels to
            object_id, name = line.split(" ", 1)
            found[name] = object_id
    for file in (repo / ".git" / "refs").rglob("*"):
        if file.is_file():
            found[file.relative_to(repo / ".git").as_posix()] = file.read_text().strip()
    return dict(sorted(found.items()))


def checkout_fingerprint(repo: Path) -> dict[str, str]:
    """Everything of the user's checkout that a run must not touch: work tree bytes, index (bytes and mtime),
    HEAD, config, every ref but the task branches (refactor-agent/*) and our private refs/refactor-agent/* (the
    wip snapshots resume reads), the stash and the list of worktrees.

    Compare one taken before a run with one taken after it, failure cases included."""
    digest: dict[str, str] = {}
    for file in sorted(repo.rglob("*")):
        relative = file.relative_to(repo).as_posix()
        if file.is_file() and not relative.startswith(".git/"):
            digest[relative] = hashlib.sha256(file.read_bytes()).hexdigest()
    for name in ("index", "HEAD", "config"):
        file = repo / ".git" / name
        digest[f".git/{name}"] = hashlib.sha256(file.read_bytes()).hexdigest() if file.exists() else "-"
    index = repo / ".git" / "index"
    digest["index-mtime"] = str(index.stat().st_mtime_ns) if index.exists() else "-"
    refs = refs_of(repo)
    ours = ("refs/heads/refactor-agent/", "refs/refactor-agent/")
    digest["refs"] = "\n".join(f"{name} {value}" for name, value in refs.items() if not name.startswith(ours))
    # HEAD's branch and commit, and the stash's entries (its reflog), from what git reads them from: the HEAD file
    # (a branch's name, or a detached commit) and every ref, ours too; the stash's log file.
    head = (repo / ".git" / "HEAD").read_text().strip()
    digest["branch"] = head.removeprefix("ref: ") if head.startswith("ref: ") else ""
    digest["head-commit"] = refs.get(digest["branch"], "-") if digest["branch"] else head
    stash_log = repo / ".git" / "logs" / "refs" / "stash"
    digest["stash"] = hashlib.sha256(stash_log.read_bytes()).hexdigest() if stash_log.exists() else "-"
    digest["worktrees"] = read_only_git(repo, "worktree", "list", "--porcelain")
    digest["status"] = read_only_git(repo, "status", "--porcelain", "--untracked-files=all")
    return digest


def plant_fsmonitor_git_dir(worktree: Path, marker: Path) -> Path:
    """What a hostile repository or model can do to a task's worktree: a git dir of its own (`planted/.git`) whose
    core.fsmonitor is a script that touches `marker`, named by the worktree's `.git` file. Returns the planted
    repository."""
    planted = worktree / "planted"
    git(worktree, "init", "-q", str(planted))
    monitor = planted / "monitor.sh"
    monitor.write_text(f"#!/bin/sh\ntouch {marker}\n")
    monitor.chmod(0o755)
    git(planted, "config", "core.fsmonitor", str(monitor))
    (worktree / ".git").write_text(f"gitdir: {planted / '.git'}\n")
    return planted
