"""A `[[repo]]`'s predicates (`if_path_exists`, `if_contains`), read on the host from the default branch's git
objects only: no worktree, no file on disk, no link followed (a link is its target's name, never its target), a
literal pattern (no regex engine runs on the repository's text), binary files skipped, each read bounded in time.
A repository that does not match, or whose predicate git cannot answer, is skipped tonight with the reason."""

from __future__ import annotations

from agent.protocol.config import RepoSelect
from agent.worktree.safe_git import GitError, SafeGit

PREDICATE_TIMEOUT_S = 60.0
# git grep over the repository's objects as the nights read them: a literal pattern (no regex engine runs on the
# repository's text), binary files and the repository's textconv filters left out, no colour codes in the output.
LITERAL_GREP = ("grep", "-I", "--no-textconv", "--no-color", "-F")


def _pathspec(glob: str) -> str:
    """`*.py` matches at any depth, as in .gitignore; a glob with a `/` is anchored at the top."""
    return f":(top,glob){glob}" if "/" in glob else f":(top,glob)**/{glob}"


def unmatched(
    safe_git: SafeGit, commit: str, branch: str, select: RepoSelect, *, timeout_s: float = PREDICATE_TIMEOUT_S
) -> str | None:
    """Why the repository is left out tonight (`branch` at `commit` does not match, or git could not say); None
    when it matches."""
    at = f"at {branch} ({commit[:12]})"
    try:
        if select.if_path_exists is not None:
            path = select.if_path_exists
            code, _ = safe_git.run_status("cat-file", "-e", f"{commit}:{path}", allowed=(0, 1, 128), timeout=timeout_s)
            if code != 0:
                return f"if_path_exists: no {path} {at}"
        if select.if_contains is not None:
            rule = select.if_contains
            grep = (*LITERAL_GREP, "-q", "-e", rule.pattern)
            code, _ = safe_git.run_status(*grep, commit, "--", _pathspec(rule.glob), allowed=(0, 1), timeout=timeout_s)
            if code != 0:
                return f"if_contains: no {rule.glob} file contains {rule.pattern!r} {at}"
    except GitError as error:
        return f"its predicate could not be read {at}: {error}"
    return None
