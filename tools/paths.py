"""Confining model-supplied paths to the task's workspace."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

SANDBOX_ROOT = PurePosixPath("/workspace")


class PathOutsideWorkspace(ValueError):
    pass


def resolve_in_workspace(root: Path, raw: str) -> Path:
    """Map a path as the model writes it (relative, or absolute under /workspace) onto the host worktree.

    `..` is refused outright rather than normalised, and symlinks are resolved before the containment check,
    so neither a crafted path nor a link planted by a command can reach outside the worktree.
    """
    if not raw or not raw.strip():
        raise PathOutsideWorkspace("empty path")
    path = PurePosixPath(raw.strip())
    if ".." in path.parts:
        raise PathOutsideWorkspace(f"'{raw}': '..' is not allowed; use a path inside the workspace")
    if path.is_absolute():
        if path == SANDBOX_ROOT or SANDBOX_ROOT in path.parents:
            path = path.relative_to(SANDBOX_ROOT)
        elif Path(path).is_relative_to(root):
            path = PurePosixPath(Path(path).relative_to(root))
        else:
            raise PathOutsideWorkspace(f"'{raw}' is outside the workspace (/workspace)")
    if path.parts and path.parts[0] == ".git":
        raise PathOutsideWorkspace(f"'{raw}': the .git entry is managed by refactor-agent")
    real_root = root.resolve()
    candidate = (real_root / path).resolve()
    if candidate != real_root and real_root not in candidate.parents:
        raise PathOutsideWorkspace(f"'{raw}' resolves outside the workspace (symlink?)")
    return candidate


def display_path(root: Path, path: Path) -> str:
    relative = path.relative_to(root.resolve()).as_posix()
    return relative or "."
