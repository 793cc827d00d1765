"""What a repository needs, found from its committed files: Python, Node, Go and Rust.

Nothing here runs anything: the files are parsed (TOML, INI, YAML, Python's `ast`, a few regular expressions) and
turned into build steps that run later inside the build container. Python's steps use uv on the build's copy of
the committed tree (python_sources.py says what is installed, and in which order).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from agent.environment import build_tools
from agent.environment.build_tools import compiles
from agent.environment.committed import CommittedTree
from agent.environment.generated_modules import capture_step, list_tree_step
from agent.environment.plan import DEPS_DIR, ENV_ROOT, UV, SetupStep
from agent.environment.python_project import ProjectError
from agent.environment.python_sources import metadata_install, python_sources, union_install
from agent.safety.printable import printable
from sandbox.container import WORKSPACE
from sandbox.mirrors import mirror_hosts
from sandbox.suites import PYTHON_OF_SUITE

VENV = f"{ENV_ROOT}/venv"
# The version a build from git would compute, for backends that take it from tags (the build's copy has no .git).
SCM_VERSION_VARIABLES = ("SETUPTOOLS_SCM_PRETEND_VERSION", "PDM_BUILD_SCM_VERSION", "VERSIONINGIT_PRETEND_VERSION")
FALLBACK_VERSION = "0.0.0"


class DetectionError(Exception):
    """A dependency file that cannot be used; str() is the one line the user sees."""


@dataclass
class Detected:
    ecosystems: list[str] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)  # copied to DEPS_DIR
    tree_files: dict[str, bytes] = field(default_factory=dict)  # written over the build's copy of the tree
    steps: list[SetupStep] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    path_prepend: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)  # each ecosystem's default registry
    # Reachable only when the build has a network for its indexes anyway (Debian's mirror, for the C build tools
    # when something compiles): a build from a wheelhouse stays without any network.
    online_hosts: list[str] = field(default_factory=list)
    requires_python: str | None = None


def _require(tool: str, where: str) -> str:
    return f'command -v {tool} >/dev/null || {{ echo "{tool} is not in the base image: {where}" >&2; exit 127; }}'


def python_path(tree: CommittedTree) -> str:
    """Where the project's own imports resolve: the worktree's src/ for a src layout, the worktree otherwise."""
    src_layout = any(re.match(r"^src/[^/]+(/__init__\.py|\.py)$", path) for path in tree.paths())
    return f"{WORKSPACE}/src" if src_layout else WORKSPACE


def venv_step() -> SetupStep:
    """A virtual environment that still sees the base image's packages (its pytest, when the project pins none)."""
    command = f"{_require('python3', 'Python is needed')} && {UV} venv --system-site-packages {VENV}"
    return SetupStep(name="python: virtual environment", command=command)


def _scm_version(tree: CommittedTree) -> str:
    """The nearest tag as a version (a release changes it, a commit does not), or a placeholder."""
    tag = (tree.nearest_tag() or "").removeprefix("v").removeprefix("V")
    try:
        return str(Version(tag))
    except InvalidVersion:
        return FALLBACK_VERSION


def detect_python(tree: CommittedTree, found: Detected) -> None:
    try:
        sources = python_sources(tree)
    except ProjectError as error:
        raise DetectionError(str(error)) from None
    if sources is None:
        return
    prefix = ""
    if sources.project.scm_version:
        version = _scm_version(tree)
        prefix = "export " + " ".join(f"{name}={version}" for name in SCM_VERSION_VARIABLES) + "; "
    steps = [venv_step(), list_tree_step()]
    if compiles(
        *(sources.tree_files.get(name, b"").decode(errors="replace") for name in ("setup.py", "pyproject.toml"))
    ):
        steps.append(build_tools.install_step())
    if sources.export:
        steps.append(
            SetupStep(name=f"python: export {sources.project.lock}", command=prefix + sources.export, workdir=WORKSPACE)
        )
    # Paths of the repository's: shown on the terminal, so no control character of theirs gets there.
    labels = printable(", ".join(source.label for source in sources.installs)).replace("\n", "\\n")
    steps.append(
        SetupStep(name=f"python: install {labels}", command=prefix + union_install(sources), workdir=WORKSPACE)
    )
    if sources.project.installable:
        metadata = metadata_install(sources.project)
        steps.append(SetupStep(name="python: the project's metadata", command=prefix + metadata, workdir=WORKSPACE))
    steps += [capture_step(f"{VENV}/bin/python", python_path(tree)), build_tools.remove_step()]
    found.ecosystems.append(f"python ({labels})")
    found.tree_files.update(sources.tree_files)
    found.steps += steps
    found.env.update({"VIRTUAL_ENV": VENV, "PYTHONPATH": python_path(tree)})
    found.path_prepend.append(f"{VENV}/bin")
    found.requires_python = sources.project.requires_python
    found.online_hosts += mirror_hosts(list(PYTHON_OF_SUITE))


def detect_node(tree: CommittedTree, found: Detected) -> None:
    if not tree.regular("package.json"):
        return
    if not tree.regular("package-lock.json"):
        found.ecosystems.append("node (package.json without package-lock.json: nothing installed)")
        return
    found.ecosystems.append("node (npm ci)")
    for path in ("package.json", "package-lock.json"):
        found.files[path] = tree.read(path)
    where = "name a base image with Node in the [environment] table"
    found.steps.append(
        SetupStep(name="node: npm ci", command=f"{_require('npm', where)} && npm ci --ignore-scripts --no-audit")
    )
    found.hosts.append("registry.npmjs.org")
    found.env["NODE_PATH"] = f"{DEPS_DIR}/node_modules"
    found.path_prepend.append(f"{DEPS_DIR}/node_modules/.bin")


def detect_go(tree: CommittedTree, found: Detected) -> None:
    if not tree.regular("go.mod"):
        return
    found.ecosystems.append("go (go mod download)")
    for path in ("go.mod", "go.sum"):
        if tree.regular(path):
            found.files[path] = tree.read(path)
    where = "name a base image with Go in the [environment] table"
    modules = f"{ENV_ROOT}/go/mod"
    found.steps.append(
        SetupStep(
            name="go: go mod download", command=f"{_require('go', where)} && GOMODCACHE={modules} go mod download"
        )
    )
    found.hosts += ["proxy.golang.org", "sum.golang.org"]
    # At run time: the downloaded modules only, never the proxy.
    found.env.update({"GOMODCACHE": modules, "GOPROXY": "off", "GOFLAGS": "-mod=mod"})


def detect_rust(tree: CommittedTree, found: Detected) -> None:
    if not tree.regular("Cargo.toml"):
        return
    found.ecosystems.append("rust (cargo fetch)")
    for path in ("Cargo.toml", "Cargo.lock"):
        if tree.regular(path):
            found.files[path] = tree.read(path)
    where = "name a base image with Rust in the [environment] table"
    cargo_home = f"{ENV_ROOT}/cargo"
    # cargo reads the manifest's targets: an empty lib.rs stands in for the source it does not need.
    command = f"{_require('cargo', where)} && mkdir -p src && touch src/lib.rs && CARGO_HOME={cargo_home} cargo fetch"
    found.steps.append(SetupStep(name="rust: cargo fetch", command=command))
    found.hosts += ["index.crates.io", "static.crates.io"]
    found.env.update({"CARGO_HOME": cargo_home, "CARGO_NET_OFFLINE": "true"})


def detect(tree: CommittedTree) -> Detected:
    found = Detected()
    for detector in (detect_python, detect_node, detect_go, detect_rust):
        detector(tree, found)
    return found
