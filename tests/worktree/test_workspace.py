"""Worktrees on real repositories: the user's checkout is never touched, whatever the model does to its own."""

from __future__ import annotations

import os
import stat
import subprocess
import threading
import time
from pathlib import Path

import git
import pytest

from agent.protocol.config import RunConfig
from agent.record.journal import RunJournal
from agent.worktree.safe_git import GitError, SafeGit
from agent.worktree.workspace import (
    MAX_COMMIT_MESSAGE_CHARS,
    Workspace,
    WorkspaceError,
    _branch_tip,
    author_identity,
    open_repository,
    task_slug,
    wip_ref,
)
from sandbox import DEFAULT_IMAGE, DockerSandbox, docker_client, require_image

from support.repos import checkout_fingerprint, make_repo, plant_fsmonitor_git_dir
from support.repos import git as run_git

MAX_FILE_BYTES = RunConfig.model_fields["max_file_bytes"].default
ALL = 1024**3  # a diff cap no test diff reaches
USER_HOOKS = ("post-checkout", "prepare-commit-msg", "post-commit", "reference-transaction", "post-index-change")


def create(repo_path: Path, task: str, max_file_bytes: int = MAX_FILE_BYTES, **options: Path) -> Workspace:
    return Workspace.create(open_repository(repo_path), run_id="r", task=task, max_file_bytes=max_file_bytes, **options)


def committed_files(repo_path: Path, commit: str) -> list[str]:
    return sorted(git.Repo(repo_path).commit(commit).stats.files)


def test_refuses_what_is_not_a_repository_with_commits(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="not a git repository"):
        open_repository(tmp_path)
    run_git(tmp_path, "init", "-q")
    with pytest.raises(WorkspaceError, match="no commits yet"):
        open_repository(tmp_path)
    with pytest.raises(WorkspaceError, match="no such directory"):
        open_repository(tmp_path / "missing")


def test_worktree_commit_and_removal_leave_the_checkout_alone(tmp_path: Path) -> None:
    repo_path = make_repo(tmp_path / "repo")
    (repo_path / "pkg/geometry.py").write_text("# uncommitted edit\n")
    (repo_path / "scratch.txt").write_text("untracked\n")
    run_git(repo_path, "stash", "push", "-q", "--", "pkg/geometry.py")
    (repo_path / "pkg/report.py").write_text("# another uncommitted edit\n")
    before = checkout_fingerprint(repo_path)

    workspace = create(repo_path, "Rename things!")
    assert workspace.branch == "refactor-agent/r/rename-things"
    assert (workspace.path / "pkg/geometry.py").read_text().startswith("def compute_area")
    (workspace.path / "pkg/geometry.py").write_text("def area(w, h):\n    return w * h\n")
    (workspace.path / "pkg/new.py").write_text("NEW = 1\n")
    assert b"pkg/new.py" in workspace.diff(max_bytes=ALL).data
    commit = workspace.commit("Rename compute_area", {"Refactor-Agent-Run": "r1"})
    workspace.remove()

    assert checkout_fingerprint(repo_path) == before
    assert not workspace.path.exists()
    user_repo = git.Repo(repo_path)
    branch_commit = user_repo.commit(workspace.branch)
    assert branch_commit.hexsha == commit
    assert branch_commit.parents[0].hexsha == workspace.base_commit
    assert branch_commit.message == "Rename compute_area\n\nRefactor-Agent-Run: r1\n"
    assert sorted(branch_commit.stats.files) == ["pkg/geometry.py", "pkg/new.py"]


def test_removal_drops_the_checkout_and_gits_record_as_git_does_whatever_the_model_made_of_it(tmp_path: Path) -> None:
    repo_path = make_repo(tmp_path / "repo")
    run_git(repo_path, "worktree", "add", "-q", "--detach", str(tmp_path / "users"))
    one, two = create(repo_path, "one"), create(repo_path, "two")
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    # The model's: a .git directory of its own instead of git's file, links out of the checkout.
    (one.path / ".git").unlink()
    (one.path / ".git/hooks").mkdir(parents=True)
    (one.path / "link").symlink_to(outside)
    (one.path / "pkg/link").symlink_to(outside / "keep")
    one.remove()
    assert not one.scratch.exists() and not one.admin_dir.exists() and (outside / "keep").is_dir()
    listed = run_git(repo_path, "worktree", "list", "--porcelain")
    assert str(two.path) in listed and str(one.path) not in listed and str(tmp_path / "users") in listed
    run_git(repo_path, "worktree", "remove", str(tmp_path / "users"))
    two.remove()
    assert not (repo_path / ".git/worktrees").exists(), "git removes the folder with its last worktree's record"
    assert run_git(repo_path, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert run_git(repo_path, "branch", "--list", "refactor-agent/*").split() == [one.branch, two.branch]


def test_a_task_starts_at_the_users_head_as_its_new_branch_took_it_however_git_keeps_the_ref(tmp_path: Path) -> None:
    repo_path = make_repo(tmp_path / "repo")
    first = run_git(repo_path, "rev-parse", "HEAD").strip()
    run_git(repo_path, "commit", "-q", "--allow-empty", "-m", "second")
    run_git(repo_path, "checkout", "-q", "--detach", "HEAD~1")
    workspace = create(repo_path, "start")
    try:
        assert workspace.base_commit == first == workspace.head()
        # A branch git keeps elsewhere than in a loose file of its own (packed, or a symbolic ref): git's answer.
        run_git(repo_path, "symbolic-ref", "refs/heads/named", f"refs/heads/{workspace.branch}")
        run_git(repo_path, "pack-refs", "--all")
        assert not (repo_path / ".git/refs/heads" / workspace.branch).exists()
        hooks = workspace.scratch / "no-hooks"
        assert _branch_tip(open_repository(repo_path), hooks, str(workspace.branch)) == first
        assert _branch_tip(open_repository(repo_path), hooks, "named") == first
    finally:
        workspace.remove()


def test_commit_without_changes_returns_none(tmp_path: Path) -> None:
    workspace = create(make_repo(tmp_path / "repo"), "noop")
    try:
        assert workspace.diff(max_bytes=ALL).data == b""
        assert workspace.commit("nothing", {}) is None
    finally:
        workspace.remove()


def test_the_diff_stat_lists_new_and_changed_files_and_leaves_the_models_index_alone(tmp_path: Path) -> None:
    workspace = create(make_repo(tmp_path / "repo"), "stat")
    try:
        assert workspace.diff_stat(max_files=10) == ""
        (workspace.path / "pkg/geometry.py").write_text("def area(w, h):\n    return w * h\n")
        (workspace.path / "pkg/new.py").write_text("X = 1\n")
        status = run_git(workspace.path, "status", "--porcelain")
        stat = workspace.diff_stat(max_files=10)
        assert run_git(workspace.path, "status", "--porcelain") == status, "nothing staged in the model's index"
        lines = stat.splitlines()
        assert [line.split("|")[0].strip() for line in lines[:-1]] == ["pkg/geometry.py", "pkg/new.py"]
        assert lines[-1].strip().startswith("2 files changed")
        for number in range(5):
            (workspace.path / f"pkg/more_{number}.py").write_text("Y = 2\n")
        cut = workspace.diff_stat(max_files=3).splitlines()
        assert len(cut) == 5 and cut[3] == " ... 4 more files" and cut[4].strip().startswith("7 files changed")
    finally:
        workspace.remove()


def test_files_are_read_from_the_base_commit_or_as_staged_never_past_the_limit_by_one_git_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = create(make_repo(tmp_path / "repo"), "read")
    try:
        base = (workspace.path / "pkg/geometry.py").read_bytes()
        (workspace.path / "pkg/geometry.py").write_text("def area(w, h):\n    return w * h\n")
        (workspace.path / "pkg/new.py").write_text("NEW = 1\n")
        (workspace.path / "pkg/large.py").write_bytes(b"#" * 5000)
        (workspace.path / "pkg/link.py").symlink_to("geometry.py")
        assert workspace.changed_paths() == ["pkg/geometry.py", "pkg/large.py", "pkg/link.py", "pkg/new.py"]
        started = []
        popen = subprocess.Popen
        monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a[0]) or popen(*a, **k))
        wanted = [
            ("pkg/geometry.py", "before"),
            ("pkg/geometry.py", "after"),
            ("pkg/new.py", "before"),
            ("pkg/large.py", "after"),
            ("pkg", "after"),  # a directory, not a file
            ("missing.py", "after"),
            ("pkg/link.py", "after"),  # the link itself, never what it names
            ("pkg/new.py", "after"),
        ]
        read = list(workspace.files_at(wanted, limit=4096))
        assert read == [
            (("pkg/geometry.py", "before"), base),
            (("pkg/geometry.py", "after"), b"def area(w, h):\n    return w * h\n"),
            (("pkg/new.py", "before"), None),
            (("pkg/large.py", "after"), None),
            (("pkg", "after"), None),
            (("missing.py", "after"), None),
            (("pkg/link.py", "after"), b"geometry.py"),
            (("pkg/new.py", "after"), b"NEW = 1\n"),
        ]
        assert len(started) == 1, "one git process for all of them"
        assert list(workspace.files_at([("pkg/new.py", "after")], limit=8)) == [(("pkg/new.py", "after"), b"NEW = 1\n")]
        assert list(workspace.files_at([("pkg/new.py", "after")], limit=7)) == [(("pkg/new.py", "after"), None)]
    finally:
        workspace.remove()


def test_a_name_git_cannot_take_in_its_batch_reads_nothing_else_wrong(tmp_path: Path) -> None:
    """A path outside the repository ends git's batch (`fatal: ... outside repository`); a line break cannot be
    one line of it. Neither is read, and the names after them still are."""
    workspace = create(make_repo(tmp_path / "repo"), "odd names")
    try:
        (workspace.path / "odd\nname.py").write_text("ODD = 1\n")
        (workspace.path / "cr\r.py").write_text("CR = 1\n")
        workspace.stage()
        wanted = [
            ("../outside.py", "before"),
            ("pkg/geometry.py", "before"),
            ("odd\nname.py", "after"),
            ("cr\r.py", "after"),
            ("missing.py\nHEAD:pkg/geometry.py", "after"),
            ("pkg/../../x", "after"),
            ("pkg/__init__.py", "before"),
        ]
        read = dict(workspace.files_at(wanted, limit=4096))
        assert read == {
            ("../outside.py", "before"): None,
            ("pkg/geometry.py", "before"): (workspace.path / "pkg/geometry.py").read_bytes(),
            ("odd\nname.py", "after"): b"ODD = 1\n",
            ("cr\r.py", "after"): b"CR = 1\n",
            ("missing.py\nHEAD:pkg/geometry.py", "after"): None,
            ("pkg/../../x", "after"): None,
            ("pkg/__init__.py", "before"): (workspace.path / "pkg/__init__.py").read_bytes(),
        }
    finally:
        workspace.remove()


def test_slug_is_safe_for_branch_names() -> None:
    assert task_slug("Rename `foo()` → bar, everywhere!!") == "rename-foo-bar-everywhere"
    assert task_slug("???") == "task"
    assert len(task_slug("x" * 200)) <= 40


def test_cache_artifacts_are_not_committed_but_tracked_changes_are(tmp_path: Path) -> None:
    repo_path = make_repo(tmp_path / "repo")
    workspace = create(repo_path, "artifacts")
    try:
        (workspace.path / "pkg/__pycache__").mkdir()
        (workspace.path / "pkg/__pycache__/geometry.cpython-311.pyc").write_bytes(b"\0cache")
        (workspace.path / ".pytest_cache").mkdir()
        (workspace.path / ".pytest_cache/README.md").write_text("cache")
        (workspace.path / "pkg/geometry.py").write_text("def area(w, h):\n    return w * h\n")
        commit = workspace.commit("Rename", {})
    finally:
        workspace.remove()
    assert commit is not None and committed_files(repo_path, commit) == ["pkg/geometry.py"]


# --- the model owns the worktree, its `.git` file included ---


def test_a_git_file_pointed_at_the_users_repository_commits_only_on_the_task_branch(tmp_path: Path) -> None:
    repo_path = make_repo(tmp_path / "repo")
    main_before = run_git(repo_path, "rev-parse", "main")
    before = checkout_fingerprint(repo_path)
    workspace = create(repo_path, "redirect")
    try:
        (workspace.path / ".git").write_text(f"gitdir: {repo_path / '.git'}\n")
        (workspace.path / "pkg/geometry.py").write_text("def area(w, h):\n    return w * h\n")
        assert b"def area" in workspace.diff(max_bytes=ALL).data
        commit = workspace.commit("Rename", {})
    finally:
        workspace.remove()
    assert checkout_fingerprint(repo_path) == before
    assert run_git(repo_path, "rev-parse", "main") == main_before
    assert commit is not None and run_git(repo_path, "rev-parse", workspace.branch).strip() == commit
    assert committed_files(repo_path, commit) == ["pkg/geometry.py"]


def test_a_git_dir_of_the_models_own_with_an_fsmonitor_runs_nothing_on_the_host(tmp_path: Path) -> None:
    repo_path = make_repo(tmp_path / "repo")
    marker = tmp_path / "fsmonitor-ran"
    workspace = create(repo_path, "fsmonitor")
    try:
        planted = plant_fsmonitor_git_dir(workspace.path, marker)
        run_git(planted, "config", "core.hooksPath", str(planted))
        (workspace.path / "pkg/geometry.py").write_text("changed = True\n")
        workspace.diff(max_bytes=ALL)
        commit = workspace.commit("Change", {})
        assert workspace.uncommitted_files == {"planted": "a git repository of its own"}
    finally:
        workspace.remove()
    assert not marker.exists()
    assert commit is not None and committed_files(repo_path, commit) == ["pkg/geometry.py"]


def test_a_deleted_git_file_commits_nothing_into_an_enclosing_repository(tmp_path: Path) -> None:
    outer = make_repo(tmp_path / "outer")
    repo_path = make_repo(outer / "nested")
    scratch_root = outer / "scratch"
    scratch_root.mkdir()

    def outer_state() -> tuple[str, str, bytes]:
        refs = run_git(outer, "for-each-ref", "--format=%(refname) %(objectname)")
        return run_git(outer, "rev-parse", "HEAD"), refs, (outer / ".git/index").read_bytes()

    before = outer_state()
    workspace = create(repo_path, "no git file", scratch_root=scratch_root)
    try:
        (workspace.path / ".git").unlink()
        (workspace.path / "pkg/geometry.py").write_text("changed = True\n")
        commit = workspace.commit("Change", {})
    finally:
        workspace.remove()
    assert outer_state() == before
    assert commit is not None and committed_files(repo_path, commit) == ["pkg/geometry.py"]


@pytest.mark.parametrize("replacement", ["directory", "symlink"])
def test_a_git_entry_made_a_directory_or_a_link_is_replaced_without_following_it(
    tmp_path: Path, replacement: str
) -> None:
    repo_path = make_repo(tmp_path / "repo")
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("keep")
    workspace = create(repo_path, "git entry")
    try:
        entry = workspace.path / ".git"
        written_by_git = entry.read_text()
        entry.unlink()
        if replacement == "directory":
            entry.mkdir()
            (entry / "HEAD").write_text("ref: refs/heads/main\n")
        else:
            entry.symlink_to(precious)
        (workspace.path / "pkg/geometry.py").write_text("changed = True\n")
        commit = workspace.commit("Change", {})
        assert entry.read_text() == written_by_git
    finally:
        workspace.remove()
    assert (precious / "keep.txt").read_text() == "keep"
    assert commit is not None and committed_files(repo_path, commit) == ["pkg/geometry.py"]
    assert run_git(repo_path, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_the_users_hooks_and_diff_programs_never_run(tmp_path: Path) -> None:
    repo_path = make_repo(tmp_path / "repo")
    markers = tmp_path / "markers"
    markers.mkdir()
    programs = {name: repo_path / ".git/hooks" / name for name in USER_HOOKS}
    programs |= {name: tmp_path / name for name in ("diff-external", "diff-textconv")}
    for name, program in programs.items():
        program.write_text(f'#!/bin/sh\ntouch {markers / name}\ncat "$1" 2>/dev/null\nexit 0\n')
        program.chmod(0o755)
    run_git(repo_path, "config", "diff.external", str(programs["diff-external"]))
    run_git(repo_path, "config", "diff.shown.textconv", str(programs["diff-textconv"]))
    workspace = create(repo_path, "hooks")
    (workspace.path / ".gitattributes").write_text("*.py diff=shown\n")  # the model picks what a driver sees
    (workspace.path / "pkg/geometry.py").write_text("changed = True\n")
    assert b"+changed = True" in workspace.diff(max_bytes=ALL).data
    assert "pkg/geometry.py" in workspace.diff_stat(max_files=10)
    assert workspace.commit("Change", {}) is not None
    workspace.remove()
    assert sorted(os.listdir(markers)) == []
    run_git(repo_path, "commit", "-q", "--allow-empty", "-m", "the hooks themselves work")
    assert {"post-commit", "prepare-commit-msg"} <= set(os.listdir(markers))


def test_a_user_ref_that_moves_during_the_commit_is_reported(tmp_path: Path) -> None:
    repo_path = make_repo(tmp_path / "repo")
    workspace = create(repo_path, "race")
    real_git = workspace.git

    class RefMovedMeanwhile:
        def run(self, *args: str, **options: object) -> bytes:
            output = real_git.run(*args, **options)  # type: ignore[arg-type]
            if "commit-tree" in args:
                run_git(repo_path, "tag", "appeared-meanwhile")
            return output

    workspace.git = RefMovedMeanwhile()  # type: ignore[assignment]
    try:
        (workspace.path / "pkg/geometry.py").write_text("changed = True\n")
        with pytest.raises(WorkspaceError, match="refs other than refs/heads/refactor-agent/r/race changed"):
            workspace.commit("Change", {})
    finally:
        workspace.git = real_git
        workspace.remove()


def test_another_tasks_branch_and_snapshot_moving_during_the_commit_are_no_alarm(tmp_path: Path) -> None:
    """Tasks in parallel (--parallel, a fleet) commit and snapshot at the same moments: their refs are ours."""
    repo_path = make_repo(tmp_path / "repo")
    workspace = create(repo_path, "one")
    other = create(repo_path, "two")
    real_git = workspace.git

    class OtherTaskMeanwhile:
        def run(self, *args: str, **options: object) -> bytes:
            output = real_git.run(*args, **options)  # type: ignore[arg-type]
            if "commit-tree" in args:
                (other.path / "pkg/other.py").write_text("x = 1\n")
                other.snapshot(wip_ref("r", 2))
                other.commit("Other", {})
            return output

    workspace.git = OtherTaskMeanwhile()  # type: ignore[assignment]
    try:
        (workspace.path / "pkg/geometry.py").write_text("changed = True\n")
        assert workspace.commit("Change", {}) is not None
    finally:
        workspace.git = real_git
        workspace.remove()
        other.remove()


def test_only_task_branches_are_ever_committed_onto(tmp_path: Path) -> None:
    repo_path = make_repo(tmp_path / "repo")
    before = checkout_fingerprint(repo_path)
    workspace = create(repo_path, "not main")
    workspace.branch = "main"
    try:
        (workspace.path / "pkg/geometry.py").write_text("changed = True\n")
        with pytest.raises(WorkspaceError, match="refusing to commit onto refs/heads/main"):
            workspace.commit("Change", {})
    finally:
        workspace.remove()
    assert checkout_fingerprint(repo_path) == before


def test_a_worktree_head_moved_off_the_task_branch_is_never_committed_onto(tmp_path: Path) -> None:
    repo_path = make_repo(tmp_path / "repo")
    workspace = create(repo_path, "moved head")
    ref = f"refs/heads/{workspace.branch}"
    head = workspace.admin_dir / "HEAD"
    try:
        (workspace.path / "pkg/geometry.py").write_text("changed = True\n")
        head.write_text("ref: refs/heads/main\n")
        with pytest.raises(WorkspaceError, match=f"the worktree's HEAD no longer names {ref}"):
            workspace.commit("Change", {})
        assert run_git(repo_path, "rev-parse", ref).strip() == workspace.base_commit
        # Not as git writes it, yet git reads it as naming the task branch (it trims the line end): committed.
        head.write_text(f"ref: {ref}\r\n")
        commit = workspace.commit("Change", {})
        assert commit is not None and run_git(repo_path, "rev-parse", ref).strip() == commit
    finally:
        workspace.remove()


# --- sizes and messages ---


def test_oversized_files_new_or_grown_are_listed_and_not_committed(tmp_path: Path) -> None:
    repo_path = make_repo(tmp_path / "repo")
    base_report = (repo_path / "pkg/report.py").read_text()
    # A limit of 256 KiB and files 30 times it (as 300 MB are to the default 10 MiB): a tracked file grown past the
    # limit is hashed whole at each staging (its index entry, reset to the base, has no size), 3 s per 300 MB (at
    # 1 MiB, 30 MiB files, their hashing was 0.3 s of CPU).
    limit = 256 * 1024
    size = 30 * limit
    workspace = create(repo_path, "big", max_file_bytes=limit)
    try:
        (workspace.path / "data").mkdir()
        subprocess.run(["truncate", "-s", str(size), str(workspace.path / "data/big.bin")], check=True)
        (workspace.path / "small.bin").write_bytes(b"\1" * 1000)
        (workspace.path / "link").symlink_to(workspace.path / "data/big.bin")
        # A tracked file edited first (and staged so, by a diff), then grown: neither version may be committed.
        (workspace.path / "pkg/report.py").write_text("# edited\n")
        workspace.diff(max_bytes=ALL)
        subprocess.run(["truncate", "-s", str(size), str(workspace.path / "pkg/report.py")], check=True)
        (workspace.path / "pkg/geometry.py").write_text("changed = True\n")
        diff = workspace.diff(max_bytes=ALL)
        commit = workspace.commit("Change", {})
        wip = workspace.snapshot(wip_ref("r", 1))
        assert workspace.uncommitted_files == {
            "data/big.bin": f"{size} bytes, above the limit of {limit}",
            "pkg/report.py": f"{size} bytes, above the limit of {limit}: its base version is kept",
        }
    finally:
        workspace.remove()
    assert b"b/data/big.bin" not in diff.data and b"pkg/report.py" not in diff.data
    assert commit is not None and committed_files(repo_path, commit) == ["link", "pkg/geometry.py", "small.bin"]
    assert all(run_git(repo_path, "show", f"{kept}:pkg/report.py") == base_report for kept in (commit, wip))
    git_bytes = sum(file.stat().st_size for file in (repo_path / ".git").rglob("*") if file.is_file())
    assert git_bytes < limit


def test_the_first_snapshot_starts_from_the_checkouts_index_only_while_nothing_wrote_it_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo_path = make_repo(tmp_path / "repo")
    fresh = create(repo_path, "fresh", max_file_bytes=4096)
    staged = create(repo_path, "staged", max_file_bytes=4096)
    try:
        for workspace in (fresh, staged):
            (workspace.path / "pkg/geometry.py").write_text("changed = True\n")
            (workspace.path / "big.bin").write_bytes(b"x" * 5000)
        # This index written since its checkout (as git in a sandbox with a writable .git could): the snapshots start
        # from the base's tree all the same, where big.bin is a new file, and too large.
        run_git(staged.path, "add", "big.bin")
        started: list[list[str]] = []
        popen = subprocess.Popen
        monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a[0]) or popen(*a, **k))
        snapshots = {fresh: fresh.snapshot(wip_ref("r", 1))}
        assert not any("read-tree" in command for command in started), "a copy of the checkout's index"
        snapshots[staged] = staged.snapshot(wip_ref("r", 2))
        assert any("read-tree" in command for command in started)
        for workspace, wip in snapshots.items():
            assert workspace.uncommitted_files == {"big.bin": "5000 bytes, above the limit of 4096"}
            assert wip is not None and committed_files(repo_path, wip) == ["pkg/geometry.py"]
    finally:
        fresh.remove()
        staged.remove()


def test_a_summary_with_nul_control_characters_and_180_kb_still_commits(tmp_path: Path) -> None:
    repo_path = make_repo(tmp_path / "repo")
    summary = "Rename\0 things \x1b[31mred\x7f\r\n\n\tindented\n" + "word " * 36_000
    workspace = create(repo_path, "message")
    try:
        (workspace.path / "pkg/geometry.py").write_text("changed = True\n")
        commit = workspace.commit(summary, {"Refactor-Agent-Run": "r9"})
    finally:
        workspace.remove()
    assert commit is not None
    message = git.Repo(repo_path).commit(commit).message
    assert message.startswith("Rename things [31mred\n\n\tindented\nword word")
    assert "\0" not in message and "\x1b" not in message and "\r" not in message
    assert MAX_COMMIT_MESSAGE_CHARS < len(message) < MAX_COMMIT_MESSAGE_CHARS + 200
    assert message.endswith("[message cut; the full text is in summary.json]\n\nRefactor-Agent-Run: r9\n")


def test_a_large_diff_is_cut_at_a_line_and_the_patch_says_how_much(tmp_path: Path) -> None:
    repo_path = make_repo(tmp_path / "repo")
    workspace = create(repo_path, "large diff")
    try:
        (workspace.path / "many.txt").write_text("".join(f"line {n}\n" for n in range(100_000)))
        whole = workspace.diff(max_bytes=ALL)
        cut = workspace.diff(max_bytes=10_000)
    finally:
        workspace.remove()
    assert cut.total_bytes == whole.total_bytes == len(whole.data)
    assert whole.data.startswith(cut.data) and cut.data.endswith(b"\n")
    assert 9_000 < len(cut.data) <= 10_000

    journal = RunJournal(tmp_path / "runs", "run")
    journal.append_patch("task 1: big", cut.data, total_bytes=cut.total_bytes, full_change="commit abc on b")
    journal.append_patch("task 2: none", b"", total_bytes=0, full_change=None)
    journal.close()
    patch = (journal.directory / "patch.diff").read_bytes()
    assert patch.startswith(
        f"# task 1: big\n# cut: the first {len(cut.data)} of {cut.total_bytes} bytes of this diff are below; "
        "the whole change is commit abc on b\ndiff --git".encode()
    )
    assert patch.endswith(b"\n# task 2: none: no changes\n")


def test_the_fingerprint_sees_a_leaked_worktree_a_moved_ref_and_an_index_refresh(tmp_path: Path) -> None:
    repo_path = make_repo(tmp_path / "repo")
    run_git(repo_path, "tag", "v1")
    before = checkout_fingerprint(repo_path)
    run_git(repo_path, "worktree", "add", "-q", "--detach", str(tmp_path / "leaked"))
    assert checkout_fingerprint(repo_path)["worktrees"] != before["worktrees"]
    run_git(repo_path, "worktree", "remove", str(tmp_path / "leaked"))
    run_git(repo_path, "commit", "-q", "--allow-empty", "-m", "x")
    run_git(repo_path, "tag", "-f", "v1")
    run_git(repo_path, "reset", "-q", "--soft", "HEAD~1")
    assert checkout_fingerprint(repo_path)["refs"] != before["refs"]
    run_git(repo_path, "tag", "-f", "v1", "HEAD")
    assert checkout_fingerprint(repo_path) == before
    for file in repo_path.rglob("*.py"):
        os.utime(file, (1_000_000, 1_000_000))
    before = checkout_fingerprint(repo_path)
    run_git(repo_path, "status", "--porcelain")  # refreshes the stat data git keeps in the index
    assert checkout_fingerprint(repo_path)["index-mtime"] != before["index-mtime"]


# --- the sandbox's view of the user's .git: read-only ---


@pytest.mark.docker
def test_inside_the_sandbox_the_users_git_dir_cannot_be_written(tmp_path: Path) -> None:
    client = docker_client()
    require_image(client, DEFAULT_IMAGE)
    repo_path = make_repo(tmp_path / "repo")
    before = checkout_fingerprint(repo_path)
    workspace = create(repo_path, "read only")
    hooks = repo_path / ".git/hooks"
    try:
        with DockerSandbox(
            DEFAULT_IMAGE,
            workspace.path,
            run_id="test-ro-git",
            client=client,
            read_only_paths=[workspace.git_common_dir],
        ) as box:
            assert box.execute("git status --short && echo readable").output.strip() == "readable"
            identity = "-c user.email=m@example.com -c user.name=m"
            attempts = {
                "commit": f"echo x >> pkg/geometry.py && git {identity} commit -qam evil",
                "update-ref": "git update-ref refs/heads/main HEAD && git update-ref refs/heads/evil HEAD",
                "hook": f"echo 'touch /workspace/hooked' > {hooks / 'post-commit'} && chmod +x {hooks / 'post-commit'}",
            }
            for name, command in attempts.items():
                result = box.execute(command)
                assert result.exit_code != 0, (name, result.output)
                assert "Read-only file system" in result.output, (name, result.output)
    finally:
        workspace.remove()
    assert checkout_fingerprint(repo_path) == before
    assert not (hooks / "post-commit").exists()
    assert run_git(repo_path, "branch", "--list", "evil") == ""
    assert stat.S_ISDIR((repo_path / ".git").stat().st_mode)


# The model's side, from inside the real sandbox: it learns the host paths from the read-only bookkeeping.
FIND_HOST_WORKTREE = 'host=$(dirname "$(cat "$(sed "s/^gitdir: //" .git)/gitdir")")'
REDIRECTIONS = {
    "users-git-dir": 'printf "gitdir: %s\\n" "$(git rev-parse --path-format=absolute --git-common-dir)" > .git',
    "planted-fsmonitor": (
        f"{FIND_HOST_WORKTREE} && git init -q planted"
        ' && printf "#!/bin/sh\\ntouch %s/fsmonitor-ran\\n" "$host" > planted/monitor.sh && chmod +x planted/monitor.sh'
        ' && git -C planted config core.fsmonitor "$host/planted/monitor.sh"'
        ' && printf "gitdir: %s/planted/.git\\n" "$host" > .git'
    ),
}


@pytest.mark.docker
@pytest.mark.parametrize("redirection", sorted(REDIRECTIONS))
def test_a_git_file_redirected_from_the_sandbox_changes_only_the_task_branch(tmp_path: Path, redirection: str) -> None:
    client = docker_client()
    require_image(client, DEFAULT_IMAGE)
    repo_path = make_repo(tmp_path / "repo")
    before = checkout_fingerprint(repo_path)
    workspace = create(repo_path, "redirect from the sandbox")
    try:
        with DockerSandbox(
            DEFAULT_IMAGE,
            workspace.path,
            run_id="test-redirect",
            client=client,
            read_only_paths=[workspace.git_common_dir],
        ) as box:
            result = box.execute(f"echo changed >> pkg/geometry.py && {REDIRECTIONS[redirection]}")
            assert result.exit_code == 0, result.output
        commit = workspace.commit("Change", {})
        assert not (workspace.path / "fsmonitor-ran").exists()
    finally:
        workspace.remove()
    assert checkout_fingerprint(repo_path) == before
    assert commit is not None and committed_files(repo_path, commit) == ["pkg/geometry.py"]


def test_tasks_in_threads_create_their_worktrees_at_once_from_one_repo_object(tmp_path: Path) -> None:
    """--parallel and a fleet create the tasks' worktrees from their threads, sharing the run's git.Repo."""
    repo = open_repository(make_repo(tmp_path / "repo"))
    created: list[Workspace] = []
    start = threading.Barrier(8)

    def one(index: int) -> None:
        start.wait()
        created.append(Workspace.create(repo, run_id="r", task=f"task {index}", max_file_bytes=MAX_FILE_BYTES))

    threads = [threading.Thread(target=one, args=(index,), daemon=True) for index in range(8)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    try:
        assert not any(thread.is_alive() for thread in threads), "a task hung creating its worktree"
        assert len({workspace.base_commit for workspace in created}) == 1 and len(created) == 8
    finally:
        for workspace in created:
            workspace.remove()


def test_a_git_command_past_its_timeout_is_killed_and_said_in_one_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (tmp_path / "no-hooks").mkdir()
    safe = SafeGit(repo / ".git", repo, tmp_path / "no-hooks")
    with pytest.raises(GitError, match=r"^git hang failed: no answer in 0.1 s$"):
        safe.run("-c", "alias.hang=!sleep 3", "hang", timeout=0.1)


def test_a_history_ref_published_while_a_task_commits_does_not_fail_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A night publishes one task (a history ref) in the main thread while a parallel task commits: ours, not the
    user's, so the commit's check that no other ref moved lets it be."""
    repo = make_repo(tmp_path / "repo")
    workspace = create(repo, "t")
    (workspace.path / "new.py").write_text("x = 1\n")
    identity = Workspace._identity

    def publishing(self: Workspace) -> dict[str, str]:  # between the commit's two readings of the refs
        run_git(repo, "update-ref", "refs/refactor-agent/history/nightly/x/r1", "HEAD")
        return identity(self)

    monkeypatch.setattr(Workspace, "_identity", publishing)
    assert workspace.commit("Add new.py", {}) is not None
    workspace.remove()


def test_a_commit_is_authored_by_the_agent_and_committed_by_the_user(tmp_path: Path) -> None:
    repo_path = make_repo(tmp_path / "repo")  # its config names the user: Dev <dev@example.com>
    workspace = create(repo_path, "Rename")
    try:
        workspace.author = author_identity("refactor-agent ({model}) <refactor-agent@localhost>", "DeepSeek-<V4>")
        (workspace.path / "pkg/geometry.py").write_text("def area(w, h):\n    return w * h\n")
        commit = workspace.commit("Rename compute_area", {})
    finally:
        workspace.remove()
    who = run_git(repo_path, "log", "-1", "--format=%an <%ae> | %cn <%ce>", commit)
    assert who.strip() == "refactor-agent (DeepSeek-V4) <refactor-agent@localhost> | Dev <dev@example.com>"
    with pytest.raises(ValueError, match='not "Name <email>"'):
        author_identity("x", "m")
    with pytest.raises(ValueError, match='not "Name <email>"'):
        author_identity("bot\x1b[2J <b@example.com>", "m")
