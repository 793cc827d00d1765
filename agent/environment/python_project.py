"""What a Python project's own metadata says: pyproject.toml (PEP 621, PEP 735, Poetry, PDM, Hatch), setup.cfg and
setup.py (read statically), and the lock files. Parsed on the host, never run; the metadata that needs the source
is built later, in the build container, from the build's copy of the committed tree.
"""

from __future__ import annotations

import configparser
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from agent.environment import poetry
from agent.environment.committed import CommittedTree
from agent.environment.setup_py import SetupPy, files_read, read_setup_py

# Extras, dependency groups and environments a test run needs, by the names projects give them.
TEST_NAMES = ("test", "tests", "testing", "dev")
HATCH_TEST_ENVS = ("default", *TEST_NAMES, "hatch-test")
LOCK_FILES = ("uv.lock", "poetry.lock", "pdm.lock", "Pipfile.lock")
# What pip builds a project with when pyproject.toml names no build system (PEP 517's fallback).
LEGACY_BUILD_REQUIRES = ("setuptools>=40.8.0", "wheel")
# Build backends and plugins that take the version from git: the build's copy of the tree has no .git.
_SCM = re.compile(r"setuptools[-_]scm|hatch-vcs|use_scm_version|versioningit|dunamai|poetry-dynamic-versioning")


class ProjectError(Exception):
    """A metadata file that cannot be used; str() is the one line the user sees."""


@dataclass
class Requirements:
    """Requirements the repository names outside any file uv reads, and where they come from."""

    label: str
    lines: list[str]
    tests: bool = True  # a test dependency (Poetry's and a Pipfile's main tables are the runtime)


@dataclass
class PythonProject:
    source: str | None = None  # what uv builds the project's metadata from: pyproject.toml, setup.py or setup.cfg
    installable: bool = False  # has build metadata: its dist-info and entry points can be installed
    lock: str | None = None
    extras: list[str] | None = None  # every extra the metadata declares; None when only a build could tell
    groups: list[str] = field(default_factory=list)  # PEP 735 groups named for tests
    declared: list[Requirements] = field(default_factory=list)  # Poetry, PDM and Hatch tables, a Pipfile
    requires_python: str | None = None
    inputs: list[str] = field(default_factory=list)  # committed files its metadata is made from
    dependency_files: list[str] = field(default_factory=list)  # requirements files its metadata reads
    build_requires: list[str] = field(default_factory=lambda: list(LEGACY_BUILD_REQUIRES))
    scm_version: bool = False

    def test_extras(self, named_elsewhere: set[str]) -> list[str]:
        """The test-named extras it declares, and those other files name (`-e .[socks]`, tox's `extras`) when
        they exist; uv refuses an extra that does not. Unknowable before the build: the ones named elsewhere."""
        wanted = [*TEST_NAMES, *sorted(named_elsewhere - set(TEST_NAMES))]
        if self.extras is None:
            return [name for name in wanted if name in named_elsewhere]
        return [name for name in wanted if name in self.extras]


def toml_file(tree: CommittedTree, path: str) -> dict[str, Any]:
    try:
        return tomllib.loads(tree.text(path))
    except tomllib.TOMLDecodeError as error:
        raise ProjectError(f"{path} is not valid TOML: {error}") from None


def table(document: Any, *keys: str) -> dict[str, Any]:
    """document[key][key]..., or {} where any level is missing or not a table."""
    for key in keys:
        document = document.get(key) if isinstance(document, dict) else None
    return document if isinstance(document, dict) else {}


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _module_files(tree: CommittedTree, module: str) -> list[str]:
    """Where module `pkg.sub` lives, in a flat or a src layout."""
    stem = module.replace(".", "/")
    candidates = [f"{root}{stem}{tail}" for root in ("", "src/") for tail in (".py", "/__init__.py")]
    return [path for path in candidates if tree.regular(path)]


def _dynamic_files(tree: CommittedTree, value: Any) -> list[str]:
    """Files behind setuptools' `{file = ...}`/`{attr = ...}` (pyproject) and `file:`/`attr:` (setup.cfg)."""
    if isinstance(value, dict):
        files = strings(value.get("file"))
        if isinstance(value.get("attr"), str):
            files += _module_files(tree, value["attr"].rpartition(".")[0])
        return files + [path for nested in value.values() for path in _dynamic_files(tree, nested)]
    if isinstance(value, str) and value.startswith(("file:", "attr:")):
        kind, _, rest = value.partition(":")
        if kind == "attr":
            return _module_files(tree, rest.strip().rpartition(".")[0])
        return [path.strip() for path in rest.split(",") if path.strip()]
    return []


def _setup_cfg(tree: CommittedTree) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(tree.text("setup.cfg"))
    except configparser.Error as error:
        raise ProjectError(f"setup.cfg cannot be read: {' '.join(str(error).split())[:200]}") from None
    return parser


def _pep621_extras(metadata: dict[str, Any], tool: dict[str, Any]) -> list[str] | None:
    if "optional-dependencies" not in strings(metadata.get("dynamic")):
        return list(table(metadata, "optional-dependencies"))
    return list(table(tool, "setuptools", "dynamic", "optional-dependencies")) or None


def _dependency_files(
    tree: CommittedTree, document: dict[str, Any], cfg: configparser.ConfigParser | None
) -> list[str]:
    """Requirements files the metadata takes its runtime dependencies from (setuptools' `dependencies = {file}`,
    setup.cfg's `install_requires = file:`, hatch-requirements-txt): installed directly as well, so they are
    there even when building the metadata itself needs them."""
    tool = table(document, "tool")
    files = _dynamic_files(tree, table(tool, "setuptools", "dynamic").get("dependencies"))
    files += strings(table(tool, "hatch", "metadata", "hooks", "requirements_txt").get("files"))
    if cfg is not None:
        files += _dynamic_files(tree, cfg.get("options", "install_requires", fallback="").strip())
    return [path for path in dict.fromkeys(files) if tree.regular(path)]


def _metadata_inputs(tree: CommittedTree, document: dict[str, Any], cfg: configparser.ConfigParser | None) -> list[str]:
    """Files that dynamic metadata names: setuptools' file/attr, Hatch's and PDM's version path, flit's module."""
    tool = table(document, "tool")
    inputs = []
    for key, value in table(tool, "setuptools", "dynamic").items():
        if key != "readme":
            inputs += _dynamic_files(tree, value)
    inputs += strings(table(tool, "hatch", "version").get("path"))
    inputs += strings(table(tool, "hatch", "metadata", "hooks", "requirements_txt").get("files"))
    inputs += strings(table(tool, "pdm", "version").get("path"))
    # flit takes a dynamic version and description from the module itself.
    module = table(tool, "flit", "module").get("name") or table(document, "project").get("name")
    dynamic = strings(table(document, "project").get("dynamic"))
    flit = "flit" in str(table(document, "build-system").get("build-backend", ""))
    if flit and isinstance(module, str) and {"version", "description"} & set(dynamic):
        inputs += _module_files(tree, module.replace("-", "_"))
    if cfg is not None:
        for section, option in (("metadata", "version"), ("options", "install_requires")):
            inputs += _dynamic_files(tree, cfg.get(section, option, fallback="").strip())
        if cfg.has_section("options.extras_require"):
            inputs += [path for value in cfg["options.extras_require"].values() for path in _dynamic_files(tree, value)]
    return inputs


def _declared_tables(document: dict[str, Any], locked: bool) -> list[Requirements]:
    """Requirements in tables uv does not read: Poetry's (without a [project] table, or its groups without a lock),
    PDM's dev-dependencies, Hatch's test environments."""
    tool = table(document, "tool")
    poetry_table = table(tool, "poetry")
    declared = []
    if poetry_table and not table(document, "project"):
        dependencies = table(poetry_table, "dependencies")
        declared.append(Requirements("[tool.poetry.dependencies]", poetry.requirements(dependencies), tests=False))
        for extra in (name for name in TEST_NAMES if name in table(poetry_table, "extras")):
            names = strings(table(poetry_table, "extras").get(extra))
            lines = [poetry.requirement(name, {**table(dependencies, name), "optional": False}) for name in names]
            declared.append(Requirements(f"poetry extra {extra}", [line for line in lines if line]))
    if not locked:
        for name in TEST_NAMES:
            lines = poetry.requirements(table(poetry_table, "group", name, "dependencies"))
            declared.append(Requirements(f"poetry group {name}", lines))
        lines = poetry.requirements(table(poetry_table, "dev-dependencies"))
        declared.append(Requirements("[tool.poetry.dev-dependencies]", lines))
        for name, entries in table(tool, "pdm", "dev-dependencies").items():
            if name in TEST_NAMES:
                lines = [line for line in strings(entries) if not line.startswith("-")]
                declared.append(Requirements(f"pdm dev-dependencies {name}", lines))
    for name in HATCH_TEST_ENVS:
        env = table(tool, "hatch", "envs", name)
        lines = [line for line in strings(env.get("dependencies")) + strings(env.get("extra-dependencies"))]
        declared.append(Requirements(f"hatch env {name}", [line for line in lines if "{" not in line]))
    return declared


def read_project(tree: CommittedTree) -> PythonProject:
    project = PythonProject(lock=next((lock for lock in LOCK_FILES if tree.regular(lock)), None))
    document = toml_file(tree, "pyproject.toml") if tree.regular("pyproject.toml") else {}
    cfg = _setup_cfg(tree) if tree.regular("setup.cfg") else None
    setup: SetupPy | None = read_setup_py(tree.text("setup.py")) if tree.regular("setup.py") else None
    metadata, tool = table(document, "project"), table(document, "tool")
    cfg_extras = list(cfg["options.extras_require"]) if cfg and cfg.has_section("options.extras_require") else []
    if metadata:
        project.source, project.extras = "pyproject.toml", _pep621_extras(metadata, tool)
    elif setup is not None:
        # setuptools merges setup.cfg's extras with setup.py's keywords.
        project.source = "setup.py"
        project.extras = None if setup.extras is None else [*cfg_extras, *setup.extras]
    elif cfg is not None and (cfg.has_section("metadata") or cfg.has_section("options")):
        project.source, project.extras = "setup.cfg", cfg_extras
    project.installable = bool(project.source or table(document, "build-system") or table(tool, "poetry"))
    python_candidates = [
        metadata.get("requires-python"),
        poetry.constraint(str(table(tool, "poetry", "dependencies").get("python", ""))) or None,
        cfg.get("options", "python_requires", fallback=None) if cfg else None,
        setup.python_requires if setup else None,
    ]
    project.requires_python = next((value.strip() for value in python_candidates if isinstance(value, str)), None)
    project.groups = [name for name in TEST_NAMES if name in table(document, "dependency-groups")]
    project.declared = _declared_tables(document, locked=project.lock is not None)
    if tree.regular("Pipfile") and project.lock != "Pipfile.lock":
        pipfile = toml_file(tree, "Pipfile")
        for section in ("packages", "dev-packages"):
            lines = poetry.requirements(table(pipfile, section))
            project.declared.append(Requirements(f"Pipfile [{section}]", lines, tests=section == "dev-packages"))
    project.declared = [requirements for requirements in project.declared if requirements.lines]
    texts = [str(table(document, "build-system")), "setuptools_scm" if "setuptools_scm" in tool else ""]
    texts += [cfg.get("options", "setup_requires", fallback="") if cfg else "", tree.text("setup.py") if setup else ""]
    project.scm_version = (
        any(_SCM.search(text) for text in texts) or table(tool, "pdm", "version").get("source") == "scm"
    )
    if "requires" in table(document, "build-system"):
        project.build_requires = strings(table(document, "build-system").get("requires"))
    project.dependency_files = _dependency_files(tree, document, cfg)
    present = [project.lock, "pyproject.toml", "setup.cfg", "setup.py", "Pipfile"]
    inputs = [*present, *_metadata_inputs(tree, document, cfg), *(files_read(setup, tree.paths()) if setup else [])]
    project.inputs = [path for path in dict.fromkeys(inputs) if path and tree.regular(path)]
    return project
