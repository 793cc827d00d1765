"""A Python project's dependencies as the union of everything the repository says.

Runtime: a lock file (exported), or the project's metadata (PEP 621, setup.cfg, setup.py, built by uv in the
build container when it is dynamic), or Poetry's table. Tests: the test-named extras and PEP 735 groups,
Poetry/PDM/Hatch tables, requirements files (their includes followed), tox's deps, nox's installs, and the CI
workflows' `pip install` lines when nothing else names a test dependency. All of them are installed in one
resolution; when they do not resolve together, each one is installed on its own, in that order, and one that
fails is skipped with a line in the build log.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from agent.environment.build_tools import ADDED, INSTALL, NEEDS_COMPILER
from agent.environment.committed import CommittedTree
from agent.environment.plan import UV
from agent.environment.python_project import PythonProject, read_project
from agent.environment.requirements_files import found_requirement_files, is_test_file, read_requirement_files
from agent.environment.test_tooling import ci_requirements, nox_requirements, tox_requirements
from sandbox.container import WORKSPACE

EXPORTED = "/tmp/refactor-agent-requirements.txt"
UV_EXPORT = f"{UV} export --frozen --no-hashes --no-emit-project --all-groups {{extras}} -o {EXPORTED}"
LOCK_EXPORTERS = {
    "poetry.lock": f"{UV} tool run --from poetry --with poetry-plugin-export poetry export --without-hashes "
    f"--all-extras --all-groups -o {EXPORTED}",
    "pdm.lock": f"{UV} tool run pdm export --without-hashes -G :all -o {EXPORTED}",
    "Pipfile.lock": f"{UV} tool run pipenv requirements --dev > {EXPORTED}",
}
LOG_PREFIX = "==> refactor-agent:"
ATTEMPT_LOG = "/tmp/refactor-agent-attempt.log"
EXCLUDES = "/tmp/refactor-agent-excludes.txt"
MAX_ROUNDS = 6
# uv's words for a package from the index whose source distribution did not build: Failed to build `name==1.0`
# (the project itself, `name @ file:///workspace`, is never left out).
_FAILED_PACKAGE = r"s/.*Failed to \(download and \)\{0,1\}build `\([A-Za-z0-9._-]*\)\(==[^`]*\)\{0,1\}`.*/\2/p"


@dataclass
class Install:
    """One source of requirements: its name in the log and the uv arguments that install it."""

    label: str
    arguments: list[str]


@dataclass
class PythonSources:
    project: PythonProject
    installs: list[Install] = field(default_factory=list)
    export: str = ""  # the lock file's export, run before the installs
    tree_files: dict[str, bytes] = field(default_factory=dict)  # what decides the dependencies, as the build reads it
    notes: list[str] = field(default_factory=list)


def _runtime(project: PythonProject, extras: list[str]) -> tuple[str, list[Install]]:
    """The lock's export and install, or the project's metadata with each test extra."""
    if project.lock == "uv.lock":
        flags = " ".join(f"--extra {shlex.quote(name)}" for name in extras)
        return UV_EXPORT.format(extras=flags), [Install("uv.lock", ["-r", EXPORTED])]
    if project.lock is not None:
        return LOCK_EXPORTERS[project.lock], [Install(project.lock, ["-r", EXPORTED])]
    if project.source is None:
        return "", []
    installs = [Install(project.source, ["-r", project.source])]
    installs += [Install(path, ["-r", path]) for path in project.dependency_files]
    installs += [Install(f"extra {name}", ["-r", project.source, "--extra", name]) for name in extras]
    return "", installs


def python_sources(tree: CommittedTree) -> PythonSources | None:
    """Every source of the project's requirements, runtime first; None for a repository with no Python project."""
    project = read_project(tree)
    tooling = [declared for declared in (tox_requirements(tree), nox_requirements(tree)) if declared]
    roots = found_requirement_files(tree)
    files = read_requirement_files(tree, roots)
    read_requirement_files(tree, [path for declared in tooling for path in declared.files], into=files)
    named = files.extras.union(*(declared.extras for declared in tooling))
    if not (
        project.test_extras(named)
        or project.groups
        or any(declared.tests for declared in project.declared)
        or tooling
        or any(map(is_test_file, roots))
    ):
        # Nothing else names a test dependency: what CI installs before it runs the tests.
        tooling = [ci] if (ci := ci_requirements(tree)) else []
        read_requirement_files(tree, [path for declared in tooling for path in declared.files], into=files)
        named |= files.extras.union(*(declared.extras for declared in tooling))
    export, installs = _runtime(project, project.test_extras(named))
    if project.lock != "uv.lock":  # uv's export has every group already
        installs += [Install(f"group {name}", ["--group", f"pyproject.toml:{name}"]) for name in project.groups]
    installs += [Install(declared.label, declared.lines) for declared in project.declared]
    installs += [Install(path, ["-r", path]) for path in files.roots]
    installs += [Install(declared.label, declared.lines) for declared in tooling if declared.lines]
    if not installs:
        return None
    sources = PythonSources(project=project, installs=installs, export=export, notes=files.notes)
    for path in [*project.inputs, *(path for declared in tooling for path in declared.read)]:
        sources.tree_files[path] = tree.read(path)
    sources.tree_files.update(files.files)
    return sources


def say(message: str) -> str:
    """A shell command that writes a line of ours into the build log."""
    return f"printf '%s\\n' {shlex.quote(f'{LOG_PREFIX} {message}')}"


# A shell function every `uv pip install` of the build runs through. A command that failed for want of a compiler
# gets the build tools (once) and runs again; one that failed because a package's source distribution does not
# build here (pycurl without libcurl's headers) runs again without that package, which the log names. The output
# is shown when the command ends (it has to be searched).
ATTEMPT = f"""attempt() {{
    rounds=0
    while :; do
        if [ -s {EXCLUDES} ]; then "$@" --excludes {EXCLUDES}; else "$@"; fi > {ATTEMPT_LOG} 2>&1
        status=$?
        cat {ATTEMPT_LOG}
        rounds=$((rounds + 1))
        if [ $status = 0 ] || [ $rounds -ge {MAX_ROUNDS} ]; then return $status; fi
        if [ ! -e {ADDED} ] && grep -qE "{NEEDS_COMPILER}" {ATTEMPT_LOG}; then
            {say("it needs a C compiler: the build tools, for the build only")}
            {INSTALL} || return $status
            continue
        fi
        package=$(sed -n '{_FAILED_PACKAGE}' {ATTEMPT_LOG} | head -n 1)
        if [ -z "$package" ] || grep -qx "$package" {EXCLUDES} 2>/dev/null; then return $status; fi
        printf '%s\\n' "{LOG_PREFIX} left out $package: it does not build here"
        echo "$package" >> {EXCLUDES}
    done
}}
"""


def _uv_install(arguments: list[str]) -> str:
    return f"attempt {UV} pip install {shlex.join(arguments)}"


def metadata_install(project: PythonProject) -> str:
    """The project's own dist-info and entry points, and a .pth (or setuptools' finder) pointing at /workspace:
    the task's worktree is what imports, never a copy. A build that imports the project's dependencies fails in
    isolation: it is tried again in the environment, which has them now, with the project's build requirements.
    A project whose editable build fails all the same still gets its tests run."""
    editable = f"attempt {UV} pip install --no-deps -e {WORKSPACE}"
    again = say("the isolated build of the project failed: again in the environment, with its build requirements")
    requires = f"{UV} pip install {shlex.join(project.build_requires)} && " if project.build_requires else ""
    failed = say("the metadata of the project itself is not installed: its editable build failed")
    return f"{ATTEMPT}{editable} || {{ {again}; {requires}{editable} --no-build-isolation; }} || {failed}"


def union_install(sources: PythonSources) -> str:
    """One resolution of every source; if it fails, each source on its own, in order, skipping those that fail
    (the step fails only when none installs)."""
    notes = [say(note) for note in sources.notes]
    if len(sources.installs) == 1:
        return ATTEMPT + " && ".join([*notes, _uv_install(sources.installs[0].arguments)])
    pairs = [pair for install in sources.installs for pair in _pairs(install.arguments)]
    union = [word for pair in dict.fromkeys(pairs) for word in pair]
    fallback = [say("these do not install together: each one on its own, in order"), "installed=0"]
    for install in sources.installs:
        skipped = say(f"skipped {install.label}: it does not install (see above)")
        fallback.append(f"if {_uv_install(install.arguments)}; then installed=1; else {skipped}; fi")
    fallback.append('[ "$installed" = 1 ]')
    return ATTEMPT + "; ".join([*notes, f"if {_uv_install(union)}; then :; else {'; '.join(fallback)}; fi"])


def _pairs(arguments: list[str]) -> list[tuple[str, ...]]:
    """Arguments as uv reads them: an option with its value (`-r file`, `--extra x`), or a requirement."""
    pairs, position = [], 0
    while position < len(arguments):
        width = 2 if arguments[position].startswith("-") and position + 1 < len(arguments) else 1
        pairs.append(tuple(arguments[position : position + width]))
        position += width
    return pairs
