"""`refactor-agent env bundle REPO DIR`: a repository's environment carried across an air gap.

The environment is built here, with the network, from the stage's own plan written as an [environment] table
(`_from_table` of sources.py: detection, plus what `--environment` adds), so the far side's plan is the same one
and its image gets the same tag. What that build installed into the image's virtual environment is listed in a
container of the image (no network). pip downloads here the wheels of exactly those versions for the image's
Python; what has only a source distribution is built into a wheel here when the image's Python is this one; the
project's build requirements come along for its metadata. Beside them, an environment file names them as its
wheelhouse: there, `--environment DIR/environments/<repository>/environment.toml` builds with no index and no
network. Only Python's packages are carried (Node's, Go's and Rust's are not).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import docker
import git
from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag, compatible_tags, cpython_tags, platform_tags, sys_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, field_validator

from agent.bundle.manifest import ENVIRONMENTS_DIR, WHEELS_DIR, CarriedEnvironment, load_manifest
from agent.bundle.steps import StepFailed, Steps
from agent.environment.build import uv_binary
from agent.environment.committed import committed_tree
from agent.environment.detect import VENV
from agent.environment.plan import repository_slug
from agent.environment.python_project import ProjectError, read_project
from agent.environment.stage import prepare_environment
from agent.protocol.environment import EnvironmentSpec
from agent.protocol.records import EnvironmentRecord
from sandbox import DockerSandbox, SandboxLimits

STEPS = 3
ENVIRONMENT_FILE = "environment.toml"
INVENTORY_TIMEOUT_S = 120
NO_VENV_EXIT = 3
# Run by the image's own Python: the distributions of the virtual environment (not the base image's), with the
# tags of the wheel each was installed from and whether it came from a URL or is the project itself (editable).
INVENTORY = """
import importlib.metadata, json, sys, sysconfig
found = []
paths = sysconfig.get_paths()
for dist in importlib.metadata.distributions(path=sorted({paths["purelib"], paths["platlib"]})):
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    wheel = dist.read_text("WHEEL") or ""
    found.append({
        "name": dist.metadata["Name"] or "", "version": dist.version or "",
        "tags": [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")],
        "editable": bool(direct.get("dir_info", {}).get("editable")), "url": direct.get("url"),
    })
print(json.dumps({"python": "%d.%d" % sys.version_info[:2], "distributions": found}))
"""
# The build backend's own hooks, asked in the build's copy of the tree (run in a sandbox: it is the repository's
# backend, an in-tree one too).
BACKEND_HOOKS = """
import importlib, json, os, sys, tomllib
try:
    with open("pyproject.toml", "rb") as file:
        system = tomllib.load(file).get("build-system", {})
except FileNotFoundError:
    system = {}
for entry in reversed(system.get("backend-path", [])):
    sys.path.insert(0, os.path.abspath(entry))
module, _, attribute = system.get("build-backend", "setuptools.build_meta:__legacy__").partition(":")
backend = importlib.import_module(module)
for part in filter(None, attribute.split(".")):
    backend = getattr(backend, part)
asked = []
for hook in ("get_requires_for_build_editable", "get_requires_for_build_wheel"):
    if hasattr(backend, hook):
        asked += list(getattr(backend, hook)(None))
print(json.dumps(sorted(set(asked))))
"""
HOOKS_TARGET = "/tmp/refactor-agent-backend"
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")

Say = Callable[[str], None]


class Installed(BaseModel):
    """One distribution as the image's metadata says (the repository's dependencies wrote it: checked)."""

    name: str
    version: str
    tags: list[str] = []
    editable: bool = False
    url: str | None = None

    @field_validator("name")
    @classmethod
    def _a_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"not a distribution name: {value[:80]!r}")
        return value

    @field_validator("version")
    @classmethod
    def _a_version(cls, value: str) -> str:
        try:
            return str(Version(value))
        except InvalidVersion:
            raise ValueError(f"not a version: {value[:80]!r}") from None


class Inventory(BaseModel):
    python: str
    distributions: list[Installed]

    @field_validator("python")
    @classmethod
    def _major_minor(cls, value: str) -> str:
        if not re.fullmatch(r"3\.\d{1,2}", value):
            raise ValueError(f"not a Python version: {value[:20]!r}")
        return value


class NothingToCarry(Exception):
    """str() says why: an environment that installs nothing, or nothing of Python's."""


def _this_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def target_tags(python: str) -> set[Tag]:
    """The wheel tags the image's Python takes, on this machine's architecture."""
    if python == _this_python():
        return set(sys_tags())
    version = tuple(int(part) for part in python.split("."))
    platforms = list(platform_tags())
    return set(cpython_tags(version, platforms=platforms)) | set(compatible_tags(version, platforms=platforms))


def target_options(python: str) -> list[str]:
    """pip's options to download for the image's Python when it is not this one."""
    if python == _this_python():
        return []
    abi = f"cp{python.replace('.', '')}"
    return ["--python-version", python, "--implementation", "cp", "--abi", abi, "--abi", "abi3", "--abi", "none"]


def inventory(client: docker.DockerClient, image: str, scratch: Path) -> Inventory:
    empty = scratch / "workspace"
    empty.mkdir(parents=True, exist_ok=True)
    with DockerSandbox(image, empty, run_id="env-bundle", client=client, limits=SandboxLimits()) as sandbox:
        command = f"[ -x {VENV}/bin/python ] || exit {NO_VENV_EXIT}; exec {VENV}/bin/python -"
        result = sandbox.execute(command, timeout_s=INVENTORY_TIMEOUT_S, stdin=INVENTORY.encode())
    if result.exit_code == NO_VENV_EXIT:
        raise NothingToCarry(f"{image} has no Python virtual environment of ours: only Python's packages are carried")
    lines = result.output.strip().splitlines()
    if result.exit_code != 0 or not lines:
        raise NothingToCarry(
            f"the installed packages of {image} could not be listed: {lines[-1][:200] if lines else ''}"
        )
    document = json.loads(lines[-1])
    distributions = []
    for entry in document.pop("distributions", []):
        try:
            distributions.append(Installed.model_validate(entry))
        except ValueError:
            continue  # a name or version pip could not ask for: it is not a package of an index
    return Inventory(python=document.get("python", ""), distributions=distributions)


def plain_requirements(lines: list[str], what: str, steps: Steps) -> list[str]:
    """Requirements of an index, as the repository wrote them: never a URL, never an option for pip."""
    kept = []
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            steps.note(f"{what} left out, not a requirement: {line[:120]!r}")
            continue
        if requirement.url:
            steps.note(f"{what} left out, from a URL: {requirement.name}")
            continue
        kept.append(str(requirement))
    return kept


def _installed_wheels(found: Inventory, wheels: Path, options: list[str], steps: Steps, scratch: Path) -> list[str]:
    """The wheels of exactly the versions the image holds; what was left out, and why."""
    carried = [installed for installed in found.distributions if not installed.editable]
    left_out = [f"{installed.name} (installed from {installed.url})" for installed in carried if installed.url]
    wanted = [f"{installed.name}=={installed.version}" for installed in carried if not installed.url]
    downloads = scratch / "downloads"
    downloads.mkdir()
    if wanted:
        steps.pip("download", "--no-deps", "--prefer-binary", *options, "--dest", downloads, *wanted)
    for download in sorted(downloads.iterdir()):
        if download.suffix == ".whl":
            shutil.move(download, wheels / download.name)
        elif found.python == _this_python():
            steps.pip("wheel", "--no-deps", "--wheel-dir", wheels, download)
        else:
            left_out.append(f"{download.name} (a source distribution: it builds only for Python {_this_python()})")
    return left_out


def _backend_requirements(
    client: docker.DockerClient, image: str, tree: Path, wheels: Path, static: list[str], steps: Steps
) -> list[str]:
    """What the build backend asks for besides its static requirements (hatchling's `editables`): its hooks run
    in a sandbox of the image, with no network, the backend installed from the wheels carried so far."""
    uv = uv_binary().resolve()
    install = f"{uv} pip install --quiet --no-index --find-links {wheels} --target {HOOKS_TARGET} {shlex.join(static)}"
    command = f"export UV_CACHE_DIR=/tmp/uv-cache; {install} && PYTHONPATH={HOOKS_TARGET} exec {VENV}/bin/python -"
    with DockerSandbox(
        image, tree, run_id="env-bundle", client=client, limits=SandboxLimits(), read_only_paths=[wheels, uv]
    ) as sandbox:
        result = sandbox.execute(command, timeout_s=INVENTORY_TIMEOUT_S, stdin=BACKEND_HOOKS.encode())
    lines = result.output.strip().splitlines()
    steps.note(result.output)
    try:
        asked = json.loads(lines[-1]) if result.exit_code == 0 and lines else None
    except json.JSONDecodeError:
        asked = None
    if not isinstance(asked, list):
        steps.note("the build backend's hooks gave no requirements")
        return []
    return plain_requirements([line for line in asked if isinstance(line, str)], "build requirement", steps)


def _build_wheels(
    repository: git.Repo,
    client: docker.DockerClient,
    image: str,
    wheels: Path,
    options: list[str],
    steps: Steps,
    scratch: Path,
) -> list[str]:
    """The wheels the project's own metadata builds with (uv builds it in isolation, from the wheelhouse too); the
    requirements that could not be carried."""
    try:
        with committed_tree(repository) as tree:
            project = read_project(tree)
            tree.snapshot(scratch / "tree")
    except ProjectError as error:
        steps.note(f"build requirements not read: {error}")
        return []
    if not project.installable:
        return []
    static = plain_requirements(project.build_requires, "build requirement", steps)
    missing: list[str] = []
    for requirements in (static, None):
        if requirements is None:  # once the static ones are here, the backend can say what else it needs
            requirements = _backend_requirements(client, image, scratch / "tree", wheels, static, steps)
        if not requirements:
            continue
        try:
            steps.pip("download", "--only-binary", ":all:", *options, "--dest", wheels, *requirements)
        except StepFailed:
            missing += requirements
            break
    return missing


def _fitting(wheels: Path, python: str) -> list[str]:
    """Wheels the image's Python cannot take, removed; their names."""
    fits = target_tags(python)
    removed = []
    for wheel in sorted(wheels.glob("*.whl")):
        try:
            tags = parse_wheel_filename(wheel.name)[3]
        except InvalidWheelFilename:
            tags = frozenset()
        if not tags & fits:
            wheel.unlink()
            removed.append(f"{wheel.name} (not for Python {python} here)")
    return removed


def environment_file(spec: EnvironmentSpec) -> str:
    """The far side's [environment] table: the user's own, with the wheelhouse instead of any index. JSON
    strings and lists of them are TOML's too."""
    lines = ["[environment]", f"wheelhouse = {json.dumps(WHEELS_DIR)}"]
    if spec.base_image is not None:
        lines.append(f"base_image = {json.dumps(spec.base_image)}")
    if spec.packages:
        lines.append(f"packages = {json.dumps(spec.packages)}")
    if spec.setup:
        lines.append(f"setup = {json.dumps(spec.setup)}")
    if not spec.detect:
        lines.append("detect = false")
    return "\n".join(lines) + "\n"


def carry_environment(
    repository: git.Repo,
    bundle: Path,
    *,
    client: docker.DockerClient,
    sandbox_image: str,
    spec: EnvironmentSpec | None,
    allowed_base_images: Sequence[str],
    log: Path,
    say: Say,
) -> tuple[CarriedEnvironment, list[str]]:
    """The repository's wheelhouse and environment file in `bundle`; (what the manifest records, what was left
    out). Raises NothingToCarry, or StepFailed when a step fails."""
    name = Path(str(repository.working_tree_dir)).name
    home = bundle.absolute() / ENVIRONMENTS_DIR / repository_slug(name)
    steps = Steps("env bundle", STEPS, log, say)
    # The same table, with the network of the connected machine instead of the wheelhouse.
    online = (spec or EnvironmentSpec()).model_copy(update={"wheelhouse": None})

    steps.step(f"{name}'s environment, built here with the network")
    record: EnvironmentRecord = prepare_environment(
        repository,
        client=client,
        sandbox_image=sandbox_image,
        image_explicit=False,
        spec=online,
        test_command=None,
        log_path=log.with_name(f"{log.stem}-build.log"),
        progress=steps.note,
        allowed_base_images=allowed_base_images,
    )
    if record.status == "failed":
        raise StepFailed(f"{record.error} (log: {record.log})", record.log_tail)

    steps.step(f"what {record.image} installed")
    if home.exists():
        shutil.rmtree(home)  # ours: an earlier `env bundle` of the same repository
    wheels = home / WHEELS_DIR
    wheels.mkdir(parents=True)
    table = spec or EnvironmentSpec()
    indexes = ["--index-url", table.index_url] if table.index_url else []
    indexes += [word for url in table.extra_index_urls for word in ("--extra-index-url", url)]
    with tempfile.TemporaryDirectory(prefix="refactor-agent-env-bundle-") as folder:
        scratch = Path(folder)
        found = inventory(client, record.image, scratch)
        steps.note(found.model_dump_json(indent=1))

        count = len([installed for installed in found.distributions if not installed.editable])
        steps.step(f"the wheels of its {count} packages, for Python {found.python} (pip download)")
        options = [*target_options(found.python), *indexes]
        left_out = _installed_wheels(found, wheels, options, steps, scratch)
        missing = _build_wheels(repository, client, record.image, wheels, options, steps, scratch)
    if missing:
        say(
            f"  note: the build requirements {', '.join(missing)} could not all be carried: the project's own "
            "metadata may not install there (its tests still run)"
        )
    left_out += _fitting(wheels, found.python)
    total = len(list(wheels.glob("*.whl")))
    (home / ENVIRONMENT_FILE).write_text(environment_file(table))
    carried = CarriedEnvironment(
        repository=name,
        environment_file=f"{ENVIRONMENTS_DIR}/{home.name}/{ENVIRONMENT_FILE}",
        python=found.python,
        wheels=total,
    )
    manifest = load_manifest(bundle)
    if manifest is not None:
        prefix = f"{ENVIRONMENTS_DIR}/{home.name}/"
        manifest.files = {path: digest for path, digest in manifest.files.items() if not path.startswith(prefix)}
        manifest.add_files(bundle.absolute(), [path for path in sorted(home.rglob("*")) if path.is_file()])
        manifest.environments[home.name] = carried
        manifest.save(bundle)
    return carried, left_out
