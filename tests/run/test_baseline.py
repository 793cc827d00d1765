"""The baseline stage's pack of a task's worktree, while the repository's own suite runs in the sandbox."""

from __future__ import annotations

from pathlib import Path

from agent.packing import PackOptions, pack_repository
from agent.protocol.config import RunConfig
from agent.run.stages.baseline import _packer_git
from agent.worktree.workspace import Workspace, open_repository

from support.repos import make_repo, plant_fsmonitor_git_dir

MAX_FILE_BYTES = RunConfig.model_fields["max_file_bytes"].default


def test_the_pack_of_a_task_reads_the_workspaces_git_not_a_git_dir_the_suite_planted(tmp_path: Path) -> None:
    """The suite may rewrite the worktree's `.git` to name a git dir of its own whose fsmonitor is a command: the
    host's packer must list the task's files through the workspace's git, and run nothing of the planted one."""
    repo = make_repo(tmp_path / "repo")
    workspace = Workspace.create(open_repository(repo), run_id="r", task="pack", max_file_bytes=MAX_FILE_BYTES)
    marker = tmp_path / "fsmonitor-ran"
    try:
        plant_fsmonitor_git_dir(workspace.path, marker)
        options = PackOptions(cache_dir=tmp_path / "cache")

        packed = pack_repository(workspace.path, options, _packer_git(workspace))
        assert not marker.exists()
        assert {stat.path for stat in packed.stats.files} >= {"pkg/geometry.py", "tests/test_geometry.py"}
        assert "planted/monitor.sh" not in {stat.path for stat in packed.stats.files}

        # What the stage avoids: git left to find the repository from `.git` runs the planted command.
        pack_repository(workspace.path, options)
        assert marker.exists()
    finally:
        workspace.remove()
