"""Whether a task's branch is in the default branch, by what each check can see, on real git repositories; and
the default branch as a night reads it (never fetched)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent.nights.default_branch import default_branch
from agent.nights.errors import NightError
from agent.nights.history import HistoryTips
from agent.nights.merged import conflicts, find_merge
from agent.nights.plan import _branch_tips
from agent.worktree.safe_git import GitError, SafeGit

from support.repos import copy_of_template, git, make_repo

KEY = "nightly/t-1f2e3d4c5b6a"
BRANCH = "refactor-agent/nightly/add-units"


def safe_git(repo: Path) -> SafeGit:
    hooks = repo.parent / "no-hooks"
    hooks.mkdir(exist_ok=True)
    return SafeGit(repo / ".git", repo, hooks)


def task_branch(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose task branch is one commit with its trailer on main, and main moved on since (made once
    per session, copied)."""
    repo = copy_of_template(("merged_task_branch",), tmp_path / "repo", _task_branch)
    return repo, git(repo, "rev-parse", BRANCH).strip()


def _task_branch(path: Path) -> None:
    repo = make_repo(path)
    git(repo, "checkout", "-q", "-b", BRANCH)
    (repo / "pkg/units.py").write_text('UNIT = "m"\n')
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", f"Add a units module\n\nRefactor-Agent-Task: {KEY}")
    git(repo, "checkout", "-q", "main")
    (repo / "README").write_text("readme\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "Readme")


def squash(repo: Path, message: str, *, extra: bool = False) -> None:
    git(repo, "merge", "--squash", "-q", BRANCH)
    if extra:  # the reviewer added a file to the pull request
        (repo / "CHANGES").write_text("units\n")
        git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", message)


MERGES = {
    "ff": (lambda repo: git(repo, "merge", "-q", "--no-edit", BRANCH), "ancestor"),
    "merge_commit": (lambda repo: git(repo, "merge", "-q", "--no-ff", "--no-edit", BRANCH), "ancestor"),
    "rebase_merge": (lambda repo: git(repo, "cherry-pick", BRANCH), "trailer"),
    "squash_one_commit_title": (lambda repo: squash(repo, "Units (#7)"), "patch_id"),
    "squash_trailer_kept": (
        lambda repo: squash(repo, f"Units (#7)\n\n* Add a units module\n\nRefactor-Agent-Task: {KEY}", extra=True),
        "trailer",
    ),
    "squash_extra_file": (lambda repo: squash(repo, "Units (#7)", extra=True), "contained"),
    "merged_then_reverted": (
        lambda repo: (
            git(repo, "merge", "-q", "--no-ff", "--no-edit", BRANCH),
            git(repo, "revert", "--no-edit", "-m", "1", "HEAD"),
        ),
        "ancestor",
    ),
}


@pytest.mark.parametrize("how", sorted(MERGES))
def test_each_check_finds_the_merge_it_is_for(tmp_path: Path, how: str) -> None:
    repo, tip = task_branch(tmp_path)
    merge, expected = MERGES[how]
    merge(repo)
    found = find_merge(safe_git(repo), KEY, [tip], default_branch(safe_git(repo)))
    assert found is not None and found.by == expected


def test_a_squash_edited_in_review_or_a_branch_never_merged_is_not_found(tmp_path: Path) -> None:
    repo, tip = task_branch(tmp_path)
    default = default_branch(safe_git(repo))
    assert find_merge(safe_git(repo), KEY, [tip], default) is None
    git(repo, "merge", "--squash", "-q", BRANCH)
    (repo / "pkg/units.py").write_text('UNIT = "km"\n')  # the reviewer edited the branch's own line
    git(repo, "commit", "-qam", "Units (#7)")
    assert find_merge(safe_git(repo), KEY, [tip], default_branch(safe_git(repo))) is None  # the documented limit


def test_a_longer_key_in_the_log_is_not_this_tasks_trailer(tmp_path: Path) -> None:
    repo, tip = task_branch(tmp_path)
    (repo / "other.py").write_text("x = 1\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", f"Other\n\nRefactor-Agent-Task: {KEY}x")
    assert find_merge(safe_git(repo), KEY, [tip], default_branch(safe_git(repo))) is None


def test_a_tip_sharing_no_history_fails_the_checks_unless_another_tip_is_merged_even_as_a_tag(
    tmp_path: Path,
) -> None:
    repo, tip = task_branch(tmp_path)
    git(repo, "checkout", "-q", "--orphan", "unrelated")
    git(repo, "commit", "-q", "-m", "Unrelated")
    unrelated = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "main")
    with pytest.raises(GitError, match="git merge-base failed"):
        find_merge(safe_git(repo), KEY, [unrelated, tip], default_branch(safe_git(repo)))
    git(repo, "merge", "-q", "--no-edit", BRANCH)
    git(repo, "tag", "-a", "-m", "Units", "units", BRANCH)
    tag = git(repo, "rev-parse", "units").strip()  # the tag object, which names the merged commit
    found = find_merge(safe_git(repo), KEY, [unrelated, tag], default_branch(safe_git(repo)))
    assert tag != tip and found is not None and found.by == "ancestor"


def test_history_tips_are_each_branchs_published_commits_oldest_first_from_one_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, tip = task_branch(tmp_path)
    main = git(repo, "rev-parse", "main").strip()
    slug = BRANCH.removeprefix("refactor-agent/")
    for name, commit in (
        (f"{slug}/r2", tip),
        (f"{slug}/r1", main),
        (f"{slug}/r3-unfinished", tip),
        (f"{slug}-2/r1", tip),
    ):
        git(repo, "update-ref", f"refs/refactor-agent/history/{name}", commit)
    history = HistoryTips(safe_git(repo))
    started: list[list[str]] = []
    popen = subprocess.Popen
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a[0]) or popen(*a, **k))
    assert history.of(BRANCH) == [main, tip]
    assert history.of(f"{BRANCH}-2") == [tip]
    assert history.of("refactor-agent/nightly/none") == history.of("refactor-agent/nightly/add-*") == []
    assert len(started) == 1


def test_conflicts_name_the_paths_both_changed(tmp_path: Path) -> None:
    repo, tip = task_branch(tmp_path)
    assert conflicts(safe_git(repo), tip, git(repo, "rev-parse", "main").strip()) == []
    (repo / "pkg/units.py").write_text('UNIT = "ft"\n')
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "Feet")
    assert conflicts(safe_git(repo), tip, git(repo, "rev-parse", "main").strip()) == ["pkg/units.py"]


def test_the_default_branch_is_a_remotes_head_first_else_the_checked_out_branch_and_never_fetched(
    tmp_path: Path,
) -> None:
    repo, tip = task_branch(tmp_path)
    main = git(repo, "rev-parse", "main").strip()
    found = default_branch(safe_git(repo))
    assert (found.name, found.commit, found.source) == ("main", main, "checked out")
    git(repo, "remote", "add", "upstream", "https://invalid.example/none.git")
    git(repo, "remote", "add", "origin", "https://invalid.example/none.git")
    first = git(repo, "rev-parse", "main~1").strip()
    git(repo, "update-ref", "refs/remotes/origin/main", first)
    git(repo, "update-ref", "refs/remotes/upstream/trunk", main)
    git(repo, "symbolic-ref", "refs/remotes/upstream/HEAD", "refs/remotes/upstream/trunk")
    git(repo, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main")
    found = default_branch(safe_git(repo))
    assert (found.name, found.commit, found.source) == ("origin/main", first, "remote HEAD")  # origin before others
    assert find_merge(safe_git(repo), KEY, [tip], found) is None  # read from objects only: nothing fetched
    assert not (repo / ".git/FETCH_HEAD").exists()
    git(repo, "symbolic-ref", "-d", "refs/remotes/origin/HEAD")
    assert default_branch(safe_git(repo)).name == "upstream/trunk"


def test_the_checked_out_branch_is_what_git_reads_in_head_however_it_is_written(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    main = git(repo, "rev-parse", "main").strip()
    head = repo / ".git/HEAD"
    for written, name in (
        ("ref: refs/heads/main\n", "main"),
        ("ref:   refs/heads/main  \n", "main"),  # git trims the spaces around the name
        ("ref: refs/heads/refactor-agent/nightly/x\n", None),
        ("ref: refs/heads/refactor-agent/nightly/x \n", None),
    ):
        head.write_text(written)
        if name is None:
            with pytest.raises(NightError, match="the checked-out branch refactor-agent/nightly/x is refactor-agent's"):
                default_branch(safe_git(repo))
        else:
            assert (default_branch(safe_git(repo)).name, default_branch(safe_git(repo)).commit) == (name, main)
    head.write_text("ref: refs/heads/unborn\n")
    with pytest.raises(NightError, match=r"^no default branch: unborn has no commits yet"):
        default_branch(safe_git(repo))


def test_the_plans_branch_listing_gives_the_default_branchs_commit_unless_its_tip_is_no_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo")
    main = git(repo, "rev-parse", "main").strip()
    tips, commits = _branch_tips(safe_git(repo))
    started: list[list[str]] = []
    popen = subprocess.Popen
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a[0]) or popen(*a, **k))
    found = default_branch(safe_git(repo), commits)
    assert (tips, found.commit) == ({"main": main}, main)
    assert not any("rev-parse" in command for command in started), "the listing's commit"
    git(repo, "tag", "-a", "-m", "v1", "v1")
    # A branch at a tag object (git's update-ref refuses to write one; its ref file takes it).
    (repo / ".git/refs/heads/main").write_text(git(repo, "rev-parse", "v1"))
    tips, commits = _branch_tips(safe_git(repo))
    assert tips["main"] != main and "refs/heads/main" not in commits
    assert default_branch(safe_git(repo), commits).commit == main  # peeled by git, as before


def test_a_detached_head_without_a_remote_head_is_one_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    git(repo, "checkout", "-q", "--detach")
    with pytest.raises(NightError, match=r"^no default branch: HEAD is detached and there is no <remote>/HEAD"):
        default_branch(safe_git(repo))
