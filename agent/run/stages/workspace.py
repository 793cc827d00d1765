"""The workspace stage: a task's worktree and branch, created from HEAD or reopened from its wip snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import git

from agent.protocol.records import EnvironmentRecord
from agent.record.progress import TaskProgress
from agent.worktree.safe_git import GitError, SafeGit
from agent.worktree.workspace import UserConfig, Workspace, user_git, wip_ref


@dataclass
class RepoState:
    """What the run keeps per repository of the night."""

    repo: git.Repo
    git_dir: Path
    scratch: Path | None = None
    environment: EnvironmentRecord | None = None  # prepared before the repository's first task
    base: str | None = None  # where its tasks start: a named night's default branch commit; None: HEAD
    user_config: UserConfig | None = None  # the user's git config as its tasks' git takes it, read by the first


def state_git(state: RepoState) -> SafeGit:
    """Git on the user's repository for reading refs; its hooks directory is one that holds no hooks."""
    return user_git(state.repo, (state.scratch or state.git_dir) / "no-hooks")


def open_workspace(
    state: RepoState, *, run_id: str, index: int, task: str, max_file_bytes: int, resumed: TaskProgress | None
) -> Workspace:
    """The task's worktree: reopened on its branch with the files of its last snapshot when the task is resumed,
    else new from the repository's base (HEAD, or a named night's default branch)."""
    assert state.scratch is not None, "prepare_repository comes first"
    if resumed is not None and resumed.start.base_commit is not None:
        try:
            restore = state_git(state).run("rev-parse", "--verify", "-q", wip_ref(run_id, index)).strip().decode()
        except GitError:
            restore = None
        workspace = Workspace.reopen(
            state.repo,
            branch=resumed.start.branch,
            base_commit=resumed.start.base_commit,
            restore=restore,
            max_file_bytes=max_file_bytes,
            scratch_root=state.scratch,
            config=state.user_config,
        )
    else:
        workspace = Workspace.create(
            state.repo,
            run_id=run_id,
            task=f"{index}-{task}",
            max_file_bytes=max_file_bytes,
            scratch_root=state.scratch,
            start=state.base,
            config=state.user_config,
        )
    state.user_config = workspace.user_config
    return workspace
