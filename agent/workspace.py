"""A task's private checkout: a git worktree of the user's HEAD on a new branch, in a scratch directory.

The user's working tree, index, HEAD, current branch and stash are never written: the worktree has its own
index and HEAD, and the only things added to the user's repository are the task branch and git's own
bookkeeping for the worktree (removed with it).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import git

# Caches that test runs and tools leave behind: never part of a refactoring, even where the repository's own
# .gitignore forgets them. Untracked files only; changes to tracked files are always committed.
ARTIFACT_PATTERNS = (
    "__pycache__/",
    "*.py[cod]",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".hypothesis/",
    ".coverage",
    ".coverage.*",
    ".tox/",
    ".nox/",
)


def _user_excludes(repo: git.Repo) -> str:
    """The user's global ignore file, which a -c core.excludesFile of ours would otherwise replace."""
    try:
        configured = repo.git.config("--get", "core.excludesFile")
    except git.GitCommandError:
        configured = ""
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    path = Path(configured).expanduser() if configured else config_home / "git" / "ignore"
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


class WorkspaceError(Exception):
    """One-line problem with the user's repository."""


def task_slug(task: str, limit: int = 40) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", task.lower()).strip("-")
    return slug[:limit].rstrip("-") or "task"


def open_repository(path: Path) -> git.Repo:
    """The user's repository, checked: a git work tree with at least one commit."""
    if not path.exists():
        raise WorkspaceError(f"{path}: no such directory")
    try:
        repo = git.Repo(path, search_parent_directories=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise WorkspaceError(f"{path} is not a git repository (run `git init` and commit first)") from None
    if repo.bare:
        raise WorkspaceError(f"{path} is a bare repository; point refactor-agent at a checkout")
    try:
        repo.head.commit  # noqa: B018 - raises on an unborn branch
    except ValueError:
        raise WorkspaceError(f"{path} has no commits yet; commit the code the agent should work on") from None
    return repo


def dirty_description(repo: git.Repo) -> str | None:
    if not repo.is_dirty(untracked_files=True):
        return None
    changed = len(repo.index.diff(None)) + len(repo.index.diff("HEAD"))
    untracked = len(repo.untracked_files)
    return f"{changed} changed and {untracked} untracked paths"


class Workspace:
    def __init__(self, repo: git.Repo, path: Path, branch: str, base_commit: str) -> None:
        self.user_repo = repo
        self.path = path
        self.branch = branch
        self.base_commit = base_commit
        self.repo = git.Repo(path)
        # Outside the worktree, so the model can neither see nor edit it.
        self.excludes_file = path.parent / "excludes"
        self.excludes_file.write_text(_user_excludes(repo) + "\n" + "\n".join(ARTIFACT_PATTERNS) + "\n")

    @classmethod
    def create(cls, repo: git.Repo, *, run_id: str, task: str, scratch_root: Path | None = None) -> Workspace:
        base_commit = repo.head.commit.hexsha
        branch = f"refactor-agent/{run_id}/{task_slug(task)}"
        parent = Path(tempfile.mkdtemp(prefix=f"refactor-agent-{run_id}-", dir=scratch_root))
        path = parent / "worktree"
        # `worktree add -b` creates the branch at base_commit without touching the user's HEAD or index.
        repo.git.worktree("add", "--quiet", "-b", branch, str(path), base_commit)
        return cls(repo, path, branch, base_commit)

    @property
    def git_common_dir(self) -> Path:
        """The user's .git directory, which the worktree's `.git` file points into."""
        return Path(self.user_repo.git.rev_parse("--path-format=absolute", "--git-common-dir"))

    def _stage_everything(self) -> None:
        self.repo.git.execute(["git", "-c", f"core.excludesFile={self.excludes_file}", "add", "--all"])

    def diff(self) -> str:
        """Everything the task changed against its base, new files included."""
        self._stage_everything()
        return self.repo.git.diff("--cached", "--binary", self.base_commit)

    def changed_paths(self) -> list[str]:
        """Paths the task changed against its base (added, modified, deleted), as staged."""
        self._stage_everything()
        names = self.repo.git.diff("--cached", "--name-only", "-z", "--no-renames", self.base_commit)
        return [name for name in names.split("\0") if name]

    def file_at(self, path: str, which: str, *, limit: int) -> bytes | None:
        """A file's bytes at the base commit ("before") or as staged now ("after"), from git's blobs (never from
        a path on the host); None when absent or larger than `limit`."""
        spec = f"{self.base_commit}:{path}" if which == "before" else f":{path}"
        try:
            if int(self.repo.git.cat_file("-s", spec)) > limit:
                return None
            return self.repo.git.execute(["git", "cat-file", "blob", spec], stdout_as_string=False)
        except (git.GitCommandError, ValueError):
            return None

    def commit(self, message: str, trailers: dict[str, str]) -> str | None:
        """Commit all changes on the task branch; None when there is nothing to commit."""
        self._stage_everything()
        if not self.repo.git.diff("--cached", "--name-only", self.base_commit):
            return None
        trailer_block = "\n".join(f"{key}: {value}" for key, value in trailers.items())
        environment = {}
        reader = self.repo.config_reader()
        if not reader.has_option("user", "email"):
            environment = {
                "GIT_AUTHOR_NAME": "refactor-agent",
                "GIT_AUTHOR_EMAIL": "refactor-agent@localhost",
                "GIT_COMMITTER_NAME": "refactor-agent",
                "GIT_COMMITTER_EMAIL": "refactor-agent@localhost",
            }
        # --no-verify: the user's hooks are not ours to run unattended at night.
        with self.repo.git.custom_environment(**environment):
            self.repo.git.commit("--quiet", "--no-verify", "-m", f"{message.strip()}\n\n{trailer_block}")
        return self.repo.head.commit.hexsha

    def remove(self) -> None:
        """Drop the scratch checkout; the branch and its commits stay in the user's repository."""
        try:
            self.user_repo.git.worktree("remove", "--force", str(self.path))
        except git.GitCommandError:
            shutil.rmtree(self.path, ignore_errors=True)
            self.user_repo.git.worktree("prune")
        shutil.rmtree(self.path.parent, ignore_errors=True)
