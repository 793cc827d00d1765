"""A sharded task's shards, computed at planning time from the default branch's git objects only (the repository is
hostile: no checkout is read, no link is followed, every read is bounded), and the check of a changed path against
its shard's scope (the gate's).

By directory: one shard per directory `depth` levels down that holds a selected file at any depth below it (files
above that depth are in no shard). By CODEOWNERS (the first of .github/CODEOWNERS, CODEOWNERS, docs/CODEOWNERS,
a regular file): one shard per owner set, a file's owners those of the last rule that matches it (files no rule
owns are in no shard). Selected files: regular files (no link, no submodule) whose path `paths` matches (a
gitwildmatch glob: without a `/` it matches at any depth) and, with `contains`, whose text holds that literal
string (git grep -F: no regex engine runs on the repository's text; binary files never match). A path git cannot
show as text (not UTF-8, a control character, a `.`, `..` or `.git` part) is in no shard. Patterns (the user's glob,
the repository's CODEOWNERS rules) are matched by pathspec on RE2, which takes linear time whatever the pattern.
"""

from __future__ import annotations

import hashlib
import re

import pathspec
from pathspec.patterns.gitignore import GitIgnorePatternError
from pathspec.patterns.gitignore.basic import GitIgnoreBasicPattern

from agent.nights.predicates import LITERAL_GREP
from agent.protocol.config import Shard, ShardRule
from agent.safety.printable import counted, printable
from agent.worktree.safe_git import GitError, SafeGit
from agent.worktree.workspace import task_slug

SHARD_TIMEOUT_S = 60.0
MAX_FILES = 500_000  # of the default branch's tree
MAX_CODEOWNERS_BYTES = 256 * 1024
CODEOWNERS = (".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS")  # GitHub's order: the first one found counts
REGULAR_MODES = (b"100644", b"100755")
# An owner as GitHub writes one (@user, @org/team, an email address); a line with anything else is not read.
_OWNER = re.compile(r"[A-Za-z0-9@][A-Za-z0-9@._+/-]{0,99}")
_SCOPE_PATTERNS = 5  # of a CODEOWNERS shard's rules, named in its scope


class ShardError(Exception):
    """str() says why a task's shards could not be computed tonight (the task is then skipped, its shards kept)."""


def _matcher(patterns: list[str]) -> pathspec.PathSpec:
    return pathspec.PathSpec([GitIgnoreBasicPattern(pattern) for pattern in patterns], backend="re2")


def _shown(path: str) -> bool:
    parts = path.split("/")
    unsafe = any(part in ("", ".", "..") or part.lower() == ".git" for part in parts)
    return not unsafe and printable(path, one_line=True) == path


def _regular_files(safe_git: SafeGit, commit: str) -> list[str]:
    listing = safe_git.run("ls-tree", "-r", "-z", "--full-tree", commit, timeout=SHARD_TIMEOUT_S)
    files = []
    entries = [entry for entry in listing.split(b"\0") if entry]
    if len(entries) > MAX_FILES:
        raise ShardError(f"its tree has {len(entries):,} entries, more than {MAX_FILES:,}")
    for entry in entries:
        info, _, name = entry.partition(b"\t")
        if info.split(b" ")[0] not in REGULAR_MODES:
            continue  # a link (never followed), a submodule
        try:
            path = name.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if _shown(path):
            files.append(path)
    return files


def _containing(safe_git: SafeGit, commit: str, pattern: str) -> set[str]:
    grep = (*LITERAL_GREP, "-l", "-z", "-e", pattern, commit)
    code, names = safe_git.run_status(*grep, allowed=(0, 1), timeout=SHARD_TIMEOUT_S)
    prefix = f"{commit}:"
    found = (name.decode("utf-8", errors="replace") for name in names.split(b"\0") if name)
    return {name.removeprefix(prefix) for name in found} if code == 0 else set()


def selected_files(safe_git: SafeGit, commit: str, rule: ShardRule) -> list[str]:
    """The default branch's files a shard may be made of, sorted."""
    files = _regular_files(safe_git, commit)
    if rule.paths != "*":
        matcher = _matcher([rule.paths])
        files = [path for path in files if matcher.match_file(path)]
    if rule.contains is not None:
        holding = _containing(safe_git, commit, rule.contains)
        files = [path for path in files if path in holding]
    return sorted(files)


def _shard_id(by: str, label: str) -> str:
    """Stable across nights (the key's `#<id>`): readable, and unique by the label's exact text."""
    return f"{task_slug(label, 40)}-{hashlib.sha256(f'{by}:{label}'.encode()).hexdigest()[:8]}"


def _by_directory(files: list[str], depth: int) -> list[Shard]:
    directories = sorted({"/".join(path.split("/")[:depth]) for path in files if path.count("/") >= depth})
    return [
        Shard(
            id=_shard_id("directory", f"{directory}/"),
            label=f"{directory}/",
            scope=f"Only change files under {directory}/.",
            directory=directory,
        )
        for directory in directories
    ]


def _codeowners_file(safe_git: SafeGit, commit: str) -> tuple[str, bytes]:
    for path in CODEOWNERS:
        code, entry = safe_git.run_status("ls-tree", "-z", commit, "--", path, allowed=(0,), timeout=SHARD_TIMEOUT_S)
        if not entry.strip(b"\0"):
            continue
        if code != 0 or entry.split(b" ")[0] not in REGULAR_MODES:
            raise ShardError(f"{path} is not a regular file (a link is not followed)")
        size = int(safe_git.run("cat-file", "-s", f"{commit}:{path}", timeout=SHARD_TIMEOUT_S))
        if size > MAX_CODEOWNERS_BYTES:
            raise ShardError(f"{path} is {size:,} bytes, more than {MAX_CODEOWNERS_BYTES:,}")
        return path, safe_git.run("cat-file", "blob", f"{commit}:{path}", timeout=SHARD_TIMEOUT_S)
    raise ShardError(f"no CODEOWNERS file ({', '.join(CODEOWNERS)})")


def codeowners_rules(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """(pattern, owners sorted) per rule line, in order: comments and blank lines left out, and so is a line GitHub
    would not read either (a `!` negation) or one with an owner that is not one (our own, stricter check). A rule
    with no owners makes the files it matches unowned."""
    rules = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith(("#", "!")):
            continue
        comment = next((number for number, word in enumerate(words) if word.startswith("#")), len(words))
        pattern, owners = words[0], words[1:comment]
        if not all(_OWNER.fullmatch(owner) for owner in owners):
            continue
        try:
            if GitIgnoreBasicPattern(pattern).include is None:
                continue
        except GitIgnorePatternError:
            continue
        rules.append((pattern, tuple(sorted(set(owners)))))
    return rules


def _by_codeowners(safe_git: SafeGit, commit: str, files: list[str]) -> list[Shard]:
    path, blob = _codeowners_file(safe_git, commit)
    rules = codeowners_rules(blob.decode("utf-8", errors="replace"))
    patterns = [pattern for pattern, _ in rules]
    matcher = _matcher(patterns)
    owner_sets: set[tuple[str, ...]] = set()
    for result in matcher.check_files(files):
        if result.index is not None and rules[result.index][1]:
            owner_sets.add(rules[result.index][1])
    shards = []
    for owners in sorted(owner_sets):
        label = " ".join(owners)
        owned = [number for number, (_, rule_owners) in enumerate(rules) if rule_owners == owners]
        named = ", ".join(patterns[number] for number in owned[:_SCOPE_PATTERNS])
        more = f" and {len(owned) - _SCOPE_PATTERNS} more" if len(owned) > _SCOPE_PATTERNS else ""
        scope = f"Only change files whose code owners in {path} are {label} (its lines {named}{more})."
        shards.append(Shard(id=_shard_id("codeowners", label), label=label, scope=scope, rules=patterns, owned=owned))
    return shards


def compute_shards(safe_git: SafeGit, commit: str, rule: ShardRule) -> list[Shard]:
    """The shards of a task at the default branch's `commit`, in a stable order. Raises ShardError."""
    try:
        files = selected_files(safe_git, commit, rule)
        if rule.by == "directory":
            return _by_directory(files, rule.depth)
        return _by_codeowners(safe_git, commit, files)
    except (GitError, ValueError) as error:
        raise ShardError(str(error)) from None


def no_shards_reason(rule: ShardRule) -> str:
    what = f"a {rule.paths} file" if rule.paths != "*" else "a file"
    if rule.contains is not None:
        what += f" that contains {rule.contains!r}"
    if rule.by == "directory":
        return f"no shards: no directory {counted(rule.depth, 'level')} down holds {what}"
    return f"no shards: CODEOWNERS gives no owner to {what}"


def outside_scope(shard: Shard, paths: list[str]) -> list[str]:
    """The changed paths (added, modified, deleted) that are not in the shard's scope."""
    if shard.directory is not None:
        return [path for path in paths if not path.startswith(f"{shard.directory}/")]
    matcher, owned = _matcher(shard.rules), set(shard.owned)
    return [result.file for result in matcher.check_files(paths) if result.index not in owned]
