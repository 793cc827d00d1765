"""What the repository's test tooling installs: tox's `deps` of the test environment, nox's `session.install`
of its test sessions, and the `pip install` lines of CI workflows.

Everything is parsed, never run (tox, nox and the workflows would fetch from the network and run the
repository's code): the files are read by agent/gate/tooling_files.py, which the test-command detection shares
(configparser, tomllib, `ast`, `yaml.safe_load` under size caps), and each install line is split with `shlex` into
requirement specifiers, files (`-r`, `-c`) and the project's own extras (`-e .[test]`).
"""

from __future__ import annotations

import ast
import configparser
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from agent.environment.committed import CommittedFileError, CommittedTree
from agent.environment.python_project import TEST_NAMES, ProjectError, strings, table
from agent.environment.requirements_files import UNNEEDED, inside_tree
from agent.environment.setup_py import called_name
from agent.gate.tooling_files import (
    LEGACY_TOX_INI,
    MAX_WORKFLOW_BYTES,
    MAX_WORKFLOWS,
    WORKFLOWS,
    Read,
    ToolingFileError,
    nox_sessions,
    tox_inis,
    tox_tables,
    workflow,
)

# tox environments and nox sessions that run the tests, by the names projects give them.
TEST_ENVIRONMENTS = (*TEST_NAMES, "py", "py3", "unit", "unittests", "pytest")
# nox sessions that run the tests: a name that holds one of these.
TEST_SESSIONS = ("test", "unit", "pytest")
# YAML anchors can make a small file a very wide tree: at most this many nodes of a workflow are visited.
MAX_YAML_NODES = 20_000
_TOX_REFERENCE = re.compile(r"^\{\[([^\]]+)\]([\w-]+)\}$")
MAX_TOX_SUBSTITUTIONS = 5
_FACTOR = re.compile(r"^!?[\w.-]+(,!?[\w.-]+)*\s*:\s+\S")
_INSTALL = re.compile(r"(?:^|\s)(?:python[\d.]*\s+-m\s+pip|pip[\d.]*|uv\s+pip)\s+install\s+(.*)$")
# pip options whose value is the next word: skipped with it.
_VALUED = {
    "-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-t", "--target", "--prefix", "--root",
    "--python", "--upgrade-strategy", "--only-binary", "--no-binary", "--platform", "--progress-bar",
    "--trusted-host", "--cache-dir", "--src", "--python-version", "--implementation", "--abi", "--config-settings",
    "-C", "--global-option", "--build-option", "--timeout", "--retries", "--proxy", "--cert", "--client-cert",
}  # fmt: skip
# Installed by CI for itself, never by the tests: pip, the test runners' launchers.
_TOOLING = {"pip", "tox", "nox", "uv", "virtualenv", "pipenv", "poetry", "pdm", "hatch"}


@dataclass
class Declared:
    """Requirements a test tool installs: specifiers, requirements files and the project's extras."""

    label: str
    lines: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    extras: set[str] = field(default_factory=set)
    read: list[str] = field(default_factory=list)  # the files it was read from: they decide the dependencies

    def __bool__(self) -> bool:
        return bool(self.lines or self.files or self.extras)


def _word(declared: Declared, word: str) -> None:
    """One requirement-ish word: the project itself (`.`, `.[x]`), a specifier, or nothing usable."""
    self_reference = re.match(r"^\.(?:/)?(?:\[([^\]]*)\])?$", word)
    if self_reference is not None:
        declared.extras.update(name.strip() for name in (self_reference.group(1) or "").split(",") if name.strip())
        return
    if "$" in word or "{" in word or word.startswith("-"):
        return
    try:
        requirement = Requirement(word)
    except InvalidRequirement:
        return
    if requirement.url is None and requirement.name.lower() not in _TOOLING:
        declared.lines.append(word)


def _file(declared: Declared, tree: CommittedTree, base: str, name: str) -> None:
    path = inside_tree(base, name)
    if path is not None and tree.regular(path):
        declared.files.append(path)


def parse_install_words(declared: Declared, tree: CommittedTree, words: list[str], base: str = "") -> None:
    """The words after `pip install` (or in tox's deps, nox's install): files, extras and specifiers."""
    position = 0
    while position < len(words):
        word = words[position]
        option, _, attached = word.partition("=")
        if option in ("-r", "--requirement", "-c", "--constraint", "-e", "--editable") or re.match(r"^-[rce]\S", word):
            if re.match(r"^-[rce]\S", word):
                option, value = word[:2], word[2:]
            else:
                value = attached or (words[position + 1] if position + 1 < len(words) else "")
                position += 0 if attached else 1
            if option in ("-e", "--editable"):
                _word(declared, value)
            else:
                _file(declared, tree, base, value)
        elif option in _VALUED and not attached:
            position += 1
        else:
            _word(declared, word)
        position += 1


# --- tox ---


def _committed(tree: CommittedTree, max_bytes: int | None = None) -> Read:
    """The committed tree's files as the shared readers take them (agent/gate/tooling_files.py)."""

    def read(path: str) -> str | None:
        if not tree.regular(path):
            return None
        if max_bytes is None:
            return tree.text(path)
        try:
            return tree.read(path, max_bytes=max_bytes).decode("utf-8", errors="replace")
        except CommittedFileError:  # too large to be one
            return None

    return read


def _tox_lines(parser: configparser.ConfigParser, section: str, key: str, depth: int = 0) -> list[str]:
    """tox's deps: one per line, `{[base]deps}` replaced by that section's lines, `{toxinidir}/` made relative,
    conditional lines (`py38: x`) and other substitutions left out."""
    lines = []
    for raw in parser.get(section, key, fallback="").splitlines():
        line = re.sub(r"\s+#.*$", "", raw).strip()
        line = line.replace("{toxinidir}/", "").replace("{toxinidir}", ".")
        reference = _TOX_REFERENCE.match(line)
        if reference is not None and depth < MAX_TOX_SUBSTITUTIONS:
            lines += _tox_lines(parser, reference.group(1), reference.group(2), depth + 1)
        elif line and not line.startswith("#") and not _FACTOR.match(line) and "{" not in line:
            lines.append(line)
    return lines


def _tox_words(line: str) -> list[str]:
    """A deps line: an option line (`-r file`) is split like a shell would; a requirement stays whole."""
    try:
        return shlex.split(line) if line.startswith("-") else [line]
    except ValueError:
        return []


def tox_requirements(tree: CommittedTree) -> Declared:
    declared = Declared(label="tox deps")
    sections = [
        "testenv",
        *(f"{prefix}{name}" for prefix in ("testenv:", "tox:testenv:") for name in TEST_ENVIRONMENTS),
    ]
    inis = tox_inis(_committed(tree))
    if inis:
        where, parser = inis[0]
        path = "pyproject.toml" if where == LEGACY_TOX_INI else where
        for section in (section for section in sections if parser.has_section(section)):
            for line in _tox_lines(parser, section, "deps"):
                parse_install_words(declared, tree, _tox_words(line))
        # Extras any test environment installs (`all = calendars, langdetect`): the project's own, they resolve
        # together, unlike the pins of a `min` environment's deps.
        for section in parser.sections():
            if section.startswith(("testenv", "tox:testenv")) and not UNNEEDED.search(section.partition(":")[2]):
                for line in _tox_lines(parser, section, "extras"):
                    declared.extras.update(name for name in re.split(r"[,\s]+", line) if name)
        declared.read.append(path)
    try:
        tables = tox_tables(_committed(tree))
    except ToolingFileError as error:
        raise ProjectError(str(error)) from None
    where, tox = tables[0] if tables else ("", {})
    path = where.split(" ", 1)[0]
    for env in [table(tox, "env_run_base"), *(table(tox, "env", name) for name in TEST_ENVIRONMENTS)]:
        for line in strings(env.get("deps")):
            parse_install_words(declared, tree, _tox_words(line))
        declared.extras.update(strings(env.get("extras")))
    if tox:
        declared.read.append(path)
    return declared


# --- nox ---


def _constant_words(node: ast.expr, lists: dict[str, list[str]]) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Starred) and isinstance(node.value, ast.Name):
        return lists.get(node.value.id, [])
    return []


def nox_requirements(tree: CommittedTree) -> Declared:
    declared = Declared(label="noxfile.py session.install")
    if not tree.regular("noxfile.py"):
        return declared
    declared.read.append("noxfile.py")
    sessions, lists = nox_sessions(_committed(tree))
    tests = [function for name, function in sessions.items() if any(word in name.lower() for word in TEST_SESSIONS)]
    for function in tests:
        for call in ast.walk(function):
            if isinstance(call, ast.Call) and called_name(call) == "install" and isinstance(call.func, ast.Attribute):
                words = [word for argument in call.args for word in _constant_words(argument, lists)]
                parse_install_words(declared, tree, words)
    return declared


# --- CI workflows ---


def _scripts(document: Any) -> Iterator[str]:
    """Strings under `run` (GitHub Actions) and `script`/`before_script` (GitLab CI), visiting each node once and
    at most MAX_YAML_NODES of them (YAML anchors can make a small file a very wide tree)."""
    stack, seen, visited = [(document, "")], set(), 0
    while stack and visited < MAX_YAML_NODES:
        node, key = stack.pop()
        visited += 1
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, str) and key in ("run", "script", "before_script"):
            yield node
        elif isinstance(node, dict):
            stack += [(value, str(name)) for name, value in node.items()]
        elif isinstance(node, list):
            stack += [(item, key) for item in node]


def _install_commands(script: str) -> Iterator[str]:
    joined = script.replace("\\\n", " ")
    for line in joined.splitlines():
        for segment in re.split(r"&&|;|\|\|", line):
            match = _INSTALL.search(segment.strip())
            if match is not None:
                yield match.group(1)


def ci_requirements(tree: CommittedTree) -> Declared:
    declared = Declared(label="CI workflow pip install lines")
    paths = [path for path in tree.paths() if WORKFLOWS.match(path) and tree.regular(path)][:MAX_WORKFLOWS]
    read = _committed(tree, MAX_WORKFLOW_BYTES)  # a workflow too large to be one: CI is only a last resort anyway
    for path in paths:
        for script in _scripts(workflow(read(path))):
            for arguments in _install_commands(script):
                try:
                    words = shlex.split(arguments, comments=True)
                except ValueError:
                    continue
                parse_install_words(declared, tree, words)
                declared.read.append(path)
    declared.lines, declared.files = list(dict.fromkeys(declared.lines)), list(dict.fromkeys(declared.files))
    declared.read = list(dict.fromkeys(declared.read))
    return declared
