"""What a repository needs, found from its committed dependency files: Python, Node, Go and Rust.

Nothing here runs anything: the files are parsed (TOML, a few regular expressions) and turned into build steps
that run later inside the build container. Python's steps use uv, which reads pyproject.toml, PEP 735 groups and
uv.lock itself; other lock files go through their own tool's exporter, run with uv from the index.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass, field
from typing import Any

from agent.environment.committed import CommittedTree
from agent.environment.plan import DEPS_DIR, ENV_ROOT, TOOLS_DIR, SetupStep
from sandbox.container import WORKSPACE

VENV = f"{ENV_ROOT}/venv"
UV = f"{TOOLS_DIR}/uv"
EXPORTED = "/tmp/refactor-agent-requirements.txt"
# Extras and dependency groups a test run needs, by the names projects give them.
TEST_NAMES = ("test", "tests", "testing", "dev")
REQUIREMENTS = re.compile(r"^(requirements[^/]*\.txt|requirements/[^/]+\.txt)$")
# A requirements line naming the project itself: the worktree is on the path instead.
SELF_REFERENCE = re.compile(
    rb"^[ \t]*(-e[ \t]+|--editable[ \t]+)?\.(\[[^\]\n]*\])?[ \t]*(#[^\n]*)?(\n|$)", re.MULTILINE
)
PYTHON_FILES = (
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "uv.lock",
    "poetry.lock",
    "pdm.lock",
    "Pipfile",
    "Pipfile.lock",
)
LOCK_EXPORTERS = {
    "poetry.lock": f"{UV} tool run --from poetry --with poetry-plugin-export poetry export --without-hashes "
    f"--all-extras --all-groups -o {EXPORTED}",
    "pdm.lock": f"{UV} tool run pdm export --without-hashes -G :all -o {EXPORTED}",
    "Pipfile.lock": f"{UV} tool run pipenv requirements --dev > {EXPORTED}",
}


class DetectionError(Exception):
    """A dependency file that cannot be used; str() is the one line the user sees."""


@dataclass
class Detected:
    ecosystems: list[str] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    steps: list[SetupStep] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    path_prepend: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)  # each ecosystem's default registry


def _require(tool: str, where: str) -> str:
    return f'command -v {tool} >/dev/null || {{ echo "{tool} is not in the base image: {where}" >&2; exit 127; }}'


def _toml(tree: CommittedTree, path: str) -> dict[str, Any]:
    try:
        return tomllib.loads(tree.text(path))
    except tomllib.TOMLDecodeError as error:
        raise DetectionError(f"{path} is not valid TOML: {error}") from None


def _test_names(table: Any) -> list[str]:
    return [name for name in TEST_NAMES if isinstance(table, dict) and name in table]


def python_path(tree: CommittedTree) -> str:
    """Where the project's own imports resolve: the worktree's src/ for a src layout, the worktree otherwise."""
    src_layout = any(re.match(r"^src/[^/]+(/__init__\.py|\.py)$", path) for path in tree.paths())
    return f"{WORKSPACE}/src" if src_layout else WORKSPACE


def _python_install(tree: CommittedTree, project: dict[str, Any]) -> tuple[str, str]:
    """The install step's description and command, from the most exact source there is."""
    metadata = project.get("project") if isinstance(project.get("project"), dict) else None
    extras = _test_names((metadata or {}).get("optional-dependencies"))
    groups = _test_names(project.get("dependency-groups"))
    extra_flags = " ".join(f"--extra {shlex.quote(name)}" for name in extras)
    if tree.regular("uv.lock"):
        export = f"{UV} export --frozen --no-hashes --no-emit-project --all-groups {extra_flags} -o {EXPORTED}"
        return "uv.lock", f"{export} && {UV} pip install -r {EXPORTED}"
    for lock, exporter in LOCK_EXPORTERS.items():
        if tree.regular(lock):
            return lock, f"{exporter} && {UV} pip install -r {EXPORTED}"
    requirements = [path for path in tree.paths() if REQUIREMENTS.match(path) and tree.regular(path)]
    if metadata is not None:
        group_flags = " ".join(f"--group {shlex.quote(name)}" for name in groups)
        chosen = ", ".join([f"extra {name}" for name in extras] + [f"group {name}" for name in groups])
        return (
            f"pyproject.toml ({chosen or 'dependencies'})",
            f"{UV} pip install -r pyproject.toml {extra_flags} {group_flags}",
        )
    if requirements:
        files = " ".join(f"-r {shlex.quote(path)}" for path in requirements)
        return ", ".join(requirements), f"{UV} pip install {files}"
    for setup in ("setup.py", "setup.cfg"):
        if tree.regular(setup):
            return setup, f"{UV} pip install -r {setup}"
    if groups:
        group_flags = " ".join(f"--group {shlex.quote(name)}" for name in groups)
        return f"pyproject.toml (groups {', '.join(groups)})", f"{UV} pip install {group_flags}"
    return "", ""


def venv_step() -> SetupStep:
    """A virtual environment that still sees the base image's packages (its pytest, when the project pins none)."""
    command = f"{_require('python3', 'Python is needed')} && {UV} venv --system-site-packages {VENV}"
    return SetupStep(name="python: virtual environment", command=command)


def detect_python(tree: CommittedTree, found: Detected) -> None:
    present = [path for path in PYTHON_FILES if tree.regular(path)]
    requirements = [path for path in tree.paths() if REQUIREMENTS.match(path) and tree.regular(path)]
    if not present and not requirements:
        return
    project = _toml(tree, "pyproject.toml") if tree.regular("pyproject.toml") else {}
    what, install = _python_install(tree, project)
    if not install:
        return
    found.ecosystems.append(f"python ({what})")
    for path in present:
        found.files[path] = tree.read(path)
    for path in requirements:
        found.files[path] = SELF_REFERENCE.sub(b"", tree.read(path))
    found.steps += [venv_step(), SetupStep(name=f"python: install from {what}", command=install)]
    found.env.update({"VIRTUAL_ENV": VENV, "PYTHONPATH": python_path(tree)})
    found.path_prepend.append(f"{VENV}/bin")


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
