"""A `[[repo]]`'s predicates on real git: read from the default branch's objects only (links, binary files and the
working tree never count), bounded in time, and a repository that does not match is skipped with the reason."""

from __future__ import annotations

import os
from pathlib import Path

import git as gitpython
import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.nights.predicates import unmatched
from agent.protocol.config import ContainsRule, RepoSelect
from agent.worktree.workspace import user_git

from support.nights import night_fixture
from support.repos import SAMPLE_FILES, git, make_repo

PATTERN = "datetime.utcnow"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    files = {**SAMPLE_FILES, "real.txt": f"stamp = {PATTERN}()\n", "deep/er/binary.py": f"\0{PATTERN}\0"}
    repo = make_repo(tmp_path / "repo", files)
    os.symlink("real.txt", repo / "link.py")  # a .py name whose target holds the pattern: a link is its target's name
    git(repo, "add", "link.py")
    git(repo, "commit", "-q", "-m", "a link")
    (repo / "pkg" / "dirty.py").write_text(f"{PATTERN}\n")  # in the working tree only: never read
    return repo


def _unmatched(repo: Path, tmp_path: Path, select: RepoSelect, **timeout: float) -> str | None:
    hooks = tmp_path / "no-hooks"
    hooks.mkdir(exist_ok=True)
    commit = git(repo, "rev-parse", "main").strip()
    return unmatched(user_git(gitpython.Repo(repo), hooks), commit, "main", select, **timeout)


def test_a_path_in_the_default_branch_matches_and_a_missing_one_says_so(repo: Path, tmp_path: Path) -> None:
    commit = git(repo, "rev-parse", "main").strip()[:12]
    assert _unmatched(repo, tmp_path, RepoSelect(if_path_exists="pytest.ini")) is None
    assert _unmatched(repo, tmp_path, RepoSelect(if_path_exists="link.py")) is None, "a link is a path"
    missing = _unmatched(repo, tmp_path, RepoSelect(if_path_exists="setup.cfg"))
    assert missing == f"if_path_exists: no setup.cfg at main ({commit})"


def test_contains_reads_text_files_of_the_commit_only(repo: Path, tmp_path: Path) -> None:
    commit = git(repo, "rev-parse", "main").strip()[:12]
    in_text = RepoSelect(if_contains=ContainsRule(glob="*.txt", pattern=PATTERN))
    assert _unmatched(repo, tmp_path, in_text) is None
    # link.py's target holds it, binary.py holds it between NULs, pkg/dirty.py only in the working tree: no match.
    in_python = RepoSelect(if_contains=ContainsRule(glob="*.py", pattern=PATTERN))
    assert _unmatched(repo, tmp_path, in_python) == f"if_contains: no *.py file contains {PATTERN!r} at main ({commit})"
    regex_like = RepoSelect(if_contains=ContainsRule(glob="*.txt", pattern="stamp = .*"))
    assert _unmatched(repo, tmp_path, regex_like) is not None, "the pattern is literal text"
    anchored = RepoSelect(if_contains=ContainsRule(glob="pkg/*.py", pattern="compute_area"))
    assert _unmatched(repo, tmp_path, anchored) is None


def test_a_predicate_git_does_not_answer_in_time_skips_the_repository(repo: Path, tmp_path: Path) -> None:
    select = RepoSelect(if_contains=ContainsRule(glob="*.py", pattern=PATTERN))
    reason = _unmatched(repo, tmp_path, select, timeout_s=1e-6)
    assert reason is not None and reason.startswith("its predicate could not be read at main (")
    assert "no answer in" in reason


def test_a_repository_that_does_not_match_is_skipped_tonight_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixture = night_fixture(tmp_path, monkeypatch)
    commit = git(fixture.repo, "rev-parse", "main").strip()[:12]
    fixture.night_file.write_text(
        f'name = "nightly"\n[defaults]\nruns_dir = "{fixture.runs}"\n[[repo]]\npath = "{fixture.repo}"\n'
        'if_contains = { glob = "*.py", pattern = "datetime.utcnow" }\ntasks = ["Replace utcnow"]\n'
    )
    result = CliRunner().invoke(
        app, ["night", str(fixture.night_file), "--plan"], env={"XDG_CONFIG_HOME": str(tmp_path)}
    )
    assert result.exit_code == 0, result.output
    reason = f"if_contains: no *.py file contains 'datetime.utcnow' at main ({commit})"
    assert result.output.splitlines() == [
        f"{fixture.repo}: skipped: {reason}",
        f"  skip    refactor-agent/nightly/replace-utcnow  repository skipped: {reason}",
        "night nightly: 1 skipped; --plan: nothing ran, nothing was fetched",
    ]
