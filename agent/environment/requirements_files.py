"""pip requirements files as a repository keeps them: found by name, their `-r`/`-c` includes followed inside the
committed tree, and cleaned of what the build must not do (install the project itself, use other indexes).

Nothing is installed here: the cleaned files are written over the build's copy of the tree, where uv reads them
(includes resolve relative to the including file, as pip's do).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from agent.environment.committed import CommittedTree

# Where projects keep them: requirements.txt, requirements-dev.txt, requirements_test.txt, test-requirements.txt,
# requirements/*.txt, tests/requirements.txt, tests/requirements/*.txt (Django's).
_NAMED = re.compile(
    r"^(?:tests?/)?(?:requirements[^/]*|[^/]*[-_.]requirements|requirements/[^/]+)\.txt$", re.IGNORECASE
)
# Requirements files (and tox environments) for what a test run never needs: their pins (an old Sphinx, a linter's)
# would only make the union fail to resolve.
UNNEEDED = re.compile(r"doc|lint|release|publish|deploy|upload|bench|typing|mypy", re.IGNORECASE)
TEST_WORDS = re.compile(r"test|dev|ci\b|check|tox|pytest", re.IGNORECASE)
# A chain of includes deeper or wider than this is not a dependency description.
MAX_INCLUDE_DEPTH = 8
MAX_FILES = 64
_INCLUDE = re.compile(r"^(-r|--requirements?|-c|--constraints?)(?:[ \t]*=?[ \t]*)(\S+)", re.IGNORECASE)
# The project itself (`.`, `-e .`, `-e .[test]`, `-e file:.`): the worktree is on the path instead, and its
# extras are installed with the project's own dependencies.
_SELF = re.compile(r"^(?:(?:-e|--editable)[ \t]+)?(?:file:)?\.(?:/)?(?:\[([^\]]*)\])?[ \t]*(?:#.*)?$")
# Options that would send the build to indexes of the repository's choosing: the configured ones are used.
_INDEX_OPTION = re.compile(r"^(-i|--index-url|--extra-index-url|-f|--find-links|--trusted-host|--no-index)\b")


@dataclass
class RequirementFiles:
    files: dict[str, bytes] = field(default_factory=dict)  # path -> cleaned content, includes among them
    roots: list[str] = field(default_factory=list)  # the files asked for, in order (includes are not roots)
    extras: set[str] = field(default_factory=set)  # extras of the project named by `-e .[x]`
    notes: list[str] = field(default_factory=list)


def found_requirement_files(tree: CommittedTree) -> list[str]:
    """The repository's requirements files worth installing for its tests, the runtime ones first."""
    named = [path for path in tree.paths() if _NAMED.match(path) and tree.regular(path)]
    wanted = [path for path in named if not UNNEEDED.search(path.rsplit("/", 1)[-1])]
    return sorted(wanted, key=lambda path: (bool(TEST_WORDS.search(path)), path))


def is_test_file(path: str) -> bool:
    return bool(TEST_WORDS.search(path))


def read_requirement_files(
    tree: CommittedTree, roots: list[str], into: RequirementFiles | None = None
) -> RequirementFiles:
    """The files and everything they include (inside the tree), each cleaned; `into` collects several calls."""
    found = into if into is not None else RequirementFiles()
    for root in roots:
        if root not in found.roots:
            found.roots.append(root)
        _follow(tree, root, found, depth=0)
    return found


def _follow(tree: CommittedTree, path: str, found: RequirementFiles, depth: int) -> None:
    if path in found.files:
        return
    if depth > MAX_INCLUDE_DEPTH or len(found.files) >= MAX_FILES:
        found.notes.append(f"{path}: includes nested deeper than {MAX_INCLUDE_DEPTH} or more than {MAX_FILES} files")
        return
    kept: list[str] = []
    found.files[path] = b""  # marks it visited before its includes are, so a cycle ends here
    for line in _logical_lines(tree.text(path)):
        stripped = line.strip()
        if (self_reference := _SELF.match(stripped)) is not None:
            found.extras.update(name.strip() for name in (self_reference.group(1) or "").split(",") if name.strip())
            continue
        if _INDEX_OPTION.match(stripped):
            found.notes.append(f"{path}: `{stripped.split()[0]}` ignored: the build uses the configured indexes")
            continue
        include = _INCLUDE.match(stripped)
        if include is not None:
            target = inside_tree(posixpath.dirname(path), include.group(2))
            if target is None or not tree.regular(target):
                found.notes.append(f"{path}: `{stripped}` names no file of the repository, left out")
                continue
            _follow(tree, target, found, depth + 1)
        kept.append(line)
    found.files[path] = "".join(f"{line}\n" for line in kept).encode()


def _logical_lines(text: str) -> list[str]:
    """Lines with pip's backslash continuations joined, so an option and its value stay on one line."""
    return text.replace("\\\r\n", " ").replace("\\\n", " ").splitlines()


def inside_tree(base: str, relative: str) -> str | None:
    """`relative` joined to the directory `base`, or None when it leads out of the repository."""
    relative = relative.strip("'\"")
    if relative.startswith("/") or "://" in relative or "$" in relative or "{" in relative:
        return None
    joined = posixpath.normpath(posixpath.join(base, relative))
    if joined in (".", "..") or joined.startswith("../"):
        return None
    return joined
