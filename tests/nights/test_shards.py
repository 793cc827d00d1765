"""A sharded task's shards, from the default branch's objects only: by directory (depth, paths, contains) and by
CODEOWNERS owner set; links, submodules, the working tree and names that cannot be shown make no shard; the
scope check the gate makes of a changed path."""

from __future__ import annotations

import os
from pathlib import Path

import git as gitpython
import pytest

from agent.nights.shards import MAX_CODEOWNERS_BYTES, ShardError, compute_shards, outside_scope
from agent.protocol.config import Shard, ShardRule
from agent.worktree.workspace import user_git

from support.repos import git, make_repo

FILES = {
    "top.py": "utcnow\n",
    "src/a/x.py": "utcnow\n",
    "src/a/README.md": "docs\n",
    "src/b/y.py": "plain\n",
    "src/b/deep/z.py": "utcnow\n",
    "lib/c/w.txt": "plain\n",
    "docs/guide.md": "utcnow\n",
}


def _shards(repo: Path, tmp_path: Path, rule: ShardRule) -> list[Shard]:
    hooks = tmp_path / "no-hooks"
    hooks.mkdir(exist_ok=True)
    commit = git(repo, "rev-parse", "main").strip()
    return compute_shards(user_git(gitpython.Repo(repo), hooks), commit, rule)


def _labels(repo: Path, tmp_path: Path, **rule: object) -> list[str]:
    return [shard.label for shard in _shards(repo, tmp_path, ShardRule(by="directory", **rule))]


def test_directories_by_depth_paths_and_contains(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    (repo / "lib/c/w.txt").write_text("utcnow\n")  # in the working tree only: never read
    assert _labels(repo, tmp_path) == ["docs/", "lib/", "src/"]  # top.py is above depth 1: in no shard
    assert _labels(repo, tmp_path, depth=2) == ["lib/c/", "src/a/", "src/b/"]  # docs/guide.md is above depth 2
    assert _labels(repo, tmp_path, depth=3) == ["src/b/deep/"]
    assert _labels(repo, tmp_path, depth=2, paths="*.py") == ["src/a/", "src/b/"]
    assert _labels(repo, tmp_path, paths="src/a/") == ["src/"]  # a glob with a / is anchored at the top
    assert _labels(repo, tmp_path, paths="a/") == ["src/"]  # one without matches at any depth
    assert _labels(repo, tmp_path, depth=2, contains="utcnow") == ["src/a/", "src/b/"]
    assert _labels(repo, tmp_path, depth=2, contains="utc.ow") == []  # literal, no regex
    (shard,) = _shards(repo, tmp_path, ShardRule(by="directory", depth=3))
    assert (shard.scope, shard.directory) == ("Only change files under src/b/deep/.", "src/b/deep")
    assert shard.id.startswith("src-b-deep-")
    again = make_repo(tmp_path / "again", {**FILES, "src/b/deep/new.py": ""})
    (same,) = _shards(again, tmp_path, ShardRule(by="directory", depth=3))
    assert same.id == shard.id  # stable across nights and commits: the key's #<id>


def test_links_submodules_binary_files_and_unshowable_names_make_no_shard(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"real/x.py": "utcnow\n", "odd $(name) `x`/f.py": "utcnow\n"})
    os.symlink("real", repo / "dirlink")  # a link to a directory: one entry, never descended
    (repo / "links").mkdir()
    os.symlink("../real/x.py", repo / "links/x.py")  # a directory of links only
    os.symlink("utcnow", repo / "links/named")  # a link whose target's name holds the pattern
    (repo / "bin").mkdir()
    (repo / "bin/data.py").write_bytes(b"\0utcnow\0")
    for name in ("new\nline", "bidi\u202eevil", "caf\xe9-latin1"):
        place = repo / name if "latin1" not in name else Path(os.fsdecode(bytes(repo) + b"/caf\xe9-latin1"))
        place.mkdir()
        (place / "f.py").write_text("utcnow\n")
    git(repo, "add", "-A")
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{git(repo, 'rev-parse', 'HEAD').strip()},sub/mod")
    git(repo, "commit", "-q", "-m", "hostile")
    listed = git(repo, "ls-tree", "-r", "--name-only", "main")
    assert "dirlink" in listed and "sub/mod" in listed and "caf" in listed
    assert _labels(repo, tmp_path) == ["bin/", "odd $(name) `x`/", "real/"]
    assert _labels(repo, tmp_path, contains="utcnow") == ["odd $(name) `x`/", "real/"]  # binary.py never matches
    odd = _shards(repo, tmp_path, ShardRule(by="directory", contains="utcnow"))[0]
    assert odd.id.startswith("odd-name-x-") and odd.scope == "Only change files under odd $(name) `x`/."


CODEOWNERS = """\
# owners
*           @all
/src/a/     @team-a
/src/b/     @team-b @bob   # two owners: one set
/src/b/gen/
*.md        @docs
!negated    @nobody
/lib/       @x$(rm)
"""


def _codeowners(tmp_path: Path, text: str | None, *, where: str = ".github/CODEOWNERS") -> Path:
    files = {**FILES, "src/b/gen/g.py": "", "src/b/bob.md": ""}
    if text is not None:
        files[where] = text
    return make_repo(tmp_path / f"repo-{len(list(tmp_path.iterdir()))}", files)


def test_codeowners_makes_one_shard_per_owner_set_and_the_scope_follows_the_last_matching_rule(
    tmp_path: Path,
) -> None:
    repo = _codeowners(tmp_path, CODEOWNERS)
    shards = {shard.label: shard for shard in _shards(repo, tmp_path, ShardRule(by="codeowners"))}
    assert list(shards) == ["@all", "@bob @team-b", "@docs", "@team-a"]  # sorted; @x$(rm) is no owner: not read
    team_b = shards["@bob @team-b"]
    assert (
        team_b.scope
        == "Only change files whose code owners in .github/CODEOWNERS are @bob @team-b (its lines /src/b/)."
    )
    paths = ["src/b/y.py", "src/b/deep/z.py", "src/b/gen/g.py", "src/b/bob.md", "src/a/x.py", "top.py", "lib/c/w.txt"]
    assert outside_scope(team_b, paths) == ["src/b/gen/g.py", "src/b/bob.md", "src/a/x.py", "top.py", "lib/c/w.txt"]
    assert outside_scope(shards["@docs"], paths) == [path for path in paths if not path.endswith(".md")]
    assert outside_scope(shards["@all"], paths) == [path for path in paths if path not in ("top.py", "lib/c/w.txt")]
    docs_only = _shards(repo, tmp_path, ShardRule(by="codeowners", paths="*.md"))
    assert [shard.label for shard in docs_only] == ["@docs"]


def test_codeowners_patterns_run_in_linear_time(tmp_path: Path) -> None:
    """A pattern that backtracks exponentially in Python's re answers at once on RE2."""
    name = "a" * 200
    repo = _codeowners(tmp_path, "* @all\na*a*a*a*a*a*a*a*a*a*b @slow\n")
    (repo / name).mkdir()
    (repo / name / "f").write_text("")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "long")
    assert [shard.label for shard in _shards(repo, tmp_path, ShardRule(by="codeowners"))] == ["@all"]


@pytest.mark.parametrize("case", ["missing", "link", "too big"])
def test_a_codeowners_file_that_cannot_be_read_is_one_reason(tmp_path: Path, case: str) -> None:
    repo = _codeowners(tmp_path, None if case != "too big" else "#" * (MAX_CODEOWNERS_BYTES + 1), where="CODEOWNERS")
    if case == "link":
        os.symlink("src/a/README.md", repo / "CODEOWNERS")
        git(repo, "add", "CODEOWNERS")
        git(repo, "commit", "-q", "-m", "link")
    with pytest.raises(ShardError) as raised:
        _shards(repo, tmp_path, ShardRule(by="codeowners"))
    assert (
        str(raised.value)
        == {
            "missing": "no CODEOWNERS file (.github/CODEOWNERS, CODEOWNERS, docs/CODEOWNERS)",
            "link": "CODEOWNERS is not a regular file (a link is not followed)",
            "too big": f"CODEOWNERS is {MAX_CODEOWNERS_BYTES + 1:,} bytes, more than {MAX_CODEOWNERS_BYTES:,}",
        }[case]
    )


def test_a_directory_shards_scope_is_its_directory_only() -> None:
    shard = Shard(id="src-a-00000000", label="src/a/", scope="Only change files under src/a/.", directory="src/a")
    assert outside_scope(shard, ["src/a/x.py", "src/a/deep/y.py", "src/ab/x.py", "src/a", "top.py"]) == [
        "src/ab/x.py",
        "src/a",
        "top.py",
    ]
