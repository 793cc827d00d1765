"""What the repository's test tooling installs: tox's `deps` of the test environment, nox's `session.install`
of its test sessions, and the `pip install` lines of CI workflows.

Everything is parsed, never run (tox, nox and the workflows would fetch from the network and run the
repository's code): tox.ini with configparser, noxfile.py with `ast`, workflows with `yaml.safe_load` under size
caps, and each install line split with `shlex` into requirement specifiers, files (`-r`, `-c`) and the project's
own extras (`-e .[test]`).
"""

from __future__ import annotations

import ast
import configparser
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml
from packaging.requirements import InvalidRequirement, Requirement

from agent.environment.committed import CommittedFileError, CommittedTree
from agent.environment.python_project import TEST_NAMES, strings, table, toml_file
from agent.environment.requirements_files import UNNEEDED, inside_tree
from agent.environment.setup_py import MAX_SETUP_PY_BYTES, called_name

# tox environments and nox sessions that run the tests, by the names projects give them.
TEST_ENVIRONMENTS = (*TEST_NAMES, "py", "py3", "unit", "unittests", "pytest")
# A workflow is a few KB; a file or a document larger than these is not a workflow worth reading.
MAX_WORKFLOW_BYTES = 256 * 1024
MAX_WORKFLOWS = 32
MAX_YAML_NODES = 20_000
WORKFLOWS = re.compile(r"^(\.github/workflows/[^/]+\.ya?ml|\.gitlab-ci\.yml)$")
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


def _tox_ini(tree: CommittedTree) -> tuple[str, configparser.ConfigParser] | None:
    """tox.ini, or the legacy ini inside pyproject.toml's [tool.tox], or setup.cfg's [tox:...] sections."""
    if tree.regular("tox.ini"):
        path, text = "tox.ini", tree.text("tox.ini")
    elif tree.regular("setup.cfg") and "[tox:" in (text := tree.text("setup.cfg")):
        path = "setup.cfg"
    elif tree.regular("pyproject.toml"):
        path, text = (
            "pyproject.toml",
            str(table(toml_file(tree, "pyproject.toml"), "tool", "tox").get("legacy_tox_ini", "")),
        )
    else:
        return None
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    return path, parser


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
    if (ini := _tox_ini(tree)) is not None:
        path, parser = ini
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
    path = "tox.toml" if tree.regular("tox.toml") else "pyproject.toml"
    document = toml_file(tree, path) if tree.regular(path) else {}
    tox = document if path == "tox.toml" else table(document, "tool", "tox")
    for env in [table(tox, "env_run_base"), *(table(tox, "env", name) for name in TEST_ENVIRONMENTS)]:
        for line in strings(env.get("deps")):
            parse_install_words(declared, tree, _tox_words(line))
        declared.extras.update(strings(env.get("extras")))
    if tox:
        declared.read.append(path)
    return declared


# --- nox ---


def _session_name(function: ast.FunctionDef) -> str | None:
    """The nox session a function is (its name, or the decorator's `name=`), None when it is not one."""
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (isinstance(target, ast.Attribute) and target.attr == "session") or (
            isinstance(target, ast.Name) and target.id == "session"
        ):
            if isinstance(decorator, ast.Call):
                for keyword in decorator.keywords:
                    if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                        return str(keyword.value.value)
            return function.name
    return None


def _constant_words(node: ast.expr, lists: dict[str, list[str]]) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Starred) and isinstance(node.value, ast.Name):
        return lists.get(node.value.id, [])
    return []


def nox_test_sessions(text: str) -> tuple[list[ast.FunctionDef], dict[str, list[str]]]:
    """A noxfile's sessions named for tests, and its module-level lists of strings (often spread into
    `session.install(*DEPS)`): parsed, never run."""
    try:
        module = ast.parse(text) if len(text) <= MAX_SETUP_PY_BYTES else ast.Module(body=[], type_ignores=[])
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [], {}
    lists = {
        node.targets[0].id: [item.value for item in node.value.elts if isinstance(item, ast.Constant)]
        for node in module.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.List)
    }
    sessions = [
        function
        for function in module.body
        if isinstance(function, ast.FunctionDef)
        and (name := _session_name(function)) is not None
        and any(word in name.lower() for word in ("test", "unit", "pytest"))
    ]
    return sessions, lists


def nox_requirements(tree: CommittedTree) -> Declared:
    declared = Declared(label="noxfile.py session.install")
    if not tree.regular("noxfile.py"):
        return declared
    declared.read.append("noxfile.py")
    sessions, lists = nox_test_sessions(tree.text("noxfile.py"))
    for function in sessions:
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


def workflow_scripts(data: bytes) -> list[str]:
    """The shell scripts of a CI workflow (GitHub Actions or GitLab CI); none for what is not YAML."""
    try:
        return list(_scripts(yaml.safe_load(data)))
    except yaml.YAMLError:
        return []


def ci_requirements(tree: CommittedTree) -> Declared:
    declared = Declared(label="CI workflow pip install lines")
    paths = [path for path in tree.paths() if WORKFLOWS.match(path) and tree.regular(path)][:MAX_WORKFLOWS]
    for path in paths:
        try:
            scripts = workflow_scripts(tree.read(path, max_bytes=MAX_WORKFLOW_BYTES))
        except CommittedFileError:
            continue  # a workflow too large to be one: CI is only a last resort anyway
        for script in scripts:
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
