"""Where a repository says how it runs its tests: tox's test environment, nox's test session, a Makefile `test`
target, a CI workflow's test step. Each reader gives the first line there that runs a test runner, as the gate runs
it (agent/gate/runner_line.py), and where it found it. A Makefile or CI line that runs a shell script of the
repository (`bash scripts/test.sh`) is followed into the script, one level deep, for its runner line and the
variables it exports.

These files come from the repository and are read on the host before the model runs, so they are hostile input:
a link is never followed, only regular files are read and only their first bytes, YAML is read with the safe loader
under a size cap, and a noxfile is parsed (ast), never executed.
"""

from __future__ import annotations

import ast
import configparser
import os
import posixpath
import re
import shlex
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from agent.gate.runner_line import GATE_OWNED_VARIABLES, PYTHON, in_directory, runner_command
from agent.gate.tooling_files import (
    MAX_WORKFLOW_BYTES,
    MAX_WORKFLOWS,
    Read,
    nox_sessions,
    tox_inis,
    tox_tables,
    workflow,
)

# Every build file worth reading here is far smaller; one that is not is read as far as this.
MAX_READ_BYTES = 1024 * 1024
TOX_ENVIRONMENTS = ("py", "py3", "test", "tests", "unit", "unittests", "pytest")
NOX_SESSIONS = ("tests", "test", "unit", "unit_tests", "pytest")
SUBSTITUTION_PASSES = 5
_BRACED = re.compile(r"\{([^{}]*)\}")
# tox's factor conditions in front of a line: `py38: pytest`, `!windows,py3: pytest`.
_FACTORS = re.compile(r"^\s*!?[\w.-]+(?:\s*,\s*!?[\w.-]+)*\s*:\s+")
_MAKE_VARIABLE = re.compile(r"\$[({](\w+)[)}]")
_MAKE_ASSIGNMENT = re.compile(r"^(\w+)\s*(?:\?|:|::)?=\s*(.*?)\s*$")
SHELLS = ("bash", "sh")
# A test script is a few lines; one far larger is not read past this.
MAX_SCRIPT_BYTES = 64 * 1024
_EXPORT = re.compile(r"^export\s+([A-Za-z_]\w*)=(.*)$")

Found = tuple[str, str]  # (command, where it was found)


def read_regular(path: Path, limit: int = MAX_READ_BYTES, *, whole: bool = False) -> str:
    """The start of a regular file that is not a link; "" for anything else (and, `whole`, for a larger one)."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    with open(handle, "rb") as file:
        status = os.fstat(handle)
        if not stat.S_ISREG(status.st_mode) or (whole and status.st_size > limit):
            return ""
        return file.read(limit).decode("utf-8", errors="replace")


def is_regular(path: Path) -> bool:
    """A regular file, not a link to one."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _lines(text: str) -> Iterator[str]:
    """Logical lines: a trailing backslash continues a line; blank lines and comments are left out."""
    pending = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = (pending + line).strip(), ""
        if line and not line.startswith("#"):
            yield line
    if pending.strip():
        yield pending.strip()


class _Unresolved(Exception):
    """A tox substitution this reader cannot know outside tox (the environment's own directories)."""


def _tox_substitute(text: str, root: str, section: Callable[[str, str], str | None]) -> str:
    """tox's `{...}` substitutions as they are for the gate's run: posargs empty (or their default), envpython
    the environment's python, toxinidir the repository's top seen from the command's directory."""

    def replace(match: re.Match[str]) -> str:
        key = match.group(1)
        if key == "posargs" or key.startswith("posargs:"):
            return key.partition(":")[2]
        if key == "envpython":
            return PYTHON
        if key in ("toxinidir", "tox_root"):
            return root
        if key == "/":
            return "/"
        if key == ":":
            return ":"
        if key.startswith("env:"):
            return key[4:].partition(":")[2]
        if key.startswith("["):
            name, _, option = key[1:].partition("]")
            value = section(name, option)
            if value is not None:
                return value
        raise _Unresolved(key)

    for _ in range(SUBSTITUTION_PASSES):  # innermost first: {posargs:{toxinidir}/tests}
        text, replaced = _BRACED.subn(replace, text)
        if not replaced:
            return text
    raise _Unresolved(text)


def _relative_root(directory: str) -> str:
    """From `directory` (relative, inside the repository) back to its top: "tests" -> ".."."""
    return posixpath.relpath(".", directory) if directory not in ("", ".") else "."


def _inside(directory: str) -> str | None:
    normal = posixpath.normpath(directory.strip() or ".")
    return None if normal.startswith("..") or normal.startswith("/") else normal


def _tox_ini_command(parser: configparser.ConfigParser, file: str) -> Found | None:
    def section(name: str, option: str) -> str | None:
        return parser.get(name, option, fallback=None) if parser.has_section(name) else None

    def setting(environment: str, option: str) -> str | None:
        own = section(f"testenv:{environment}", option) if environment else None
        return own if own is not None else section("testenv", option)

    named = [name.removeprefix("testenv:") for name in parser.sections() if name.startswith("testenv:")]
    candidates = ["", *[name for name in TOX_ENVIRONMENTS if name in named]]
    candidates += [name for name in named if name.startswith("py3") and name not in candidates]
    for environment in candidates:
        commands = setting(environment, "commands")
        if not commands:
            continue
        try:
            directory = _inside(_tox_substitute(setting(environment, "changedir") or ".", ".", section))
            if directory is None:
                continue
            root = _relative_root(directory)
            lines = _tox_substitute(commands, root, section).replace(" []", "")
        except _Unresolved:
            continue
        for line in _lines(lines):
            command = runner_command(_FACTORS.sub("", line, count=1))
            if command is not None:
                where = f"{file} [testenv{':' + environment if environment else ''}] commands"
                environment_variables = _tox_setenv(setting(environment, "setenv") or "", root, section)
                return in_directory(directory, " ".join([*environment_variables, command])), where
    return None


def _tox_setenv(text: str, root: str, section: Callable[[str, str], str | None]) -> list[str]:
    """`setenv` as shell assignments; a value this reader cannot resolve is left out."""
    assignments = []
    for line in _lines(text):
        name, equals, value = _FACTORS.sub("", line, count=1).partition("=")
        if not equals or not re.fullmatch(r"[A-Za-z_]\w*", name.strip()) or name.strip() in GATE_OWNED_VARIABLES:
            continue
        try:
            assignments.append(f"{name.strip()}={shlex.quote(_tox_substitute(value.strip(), root, section))}")
        except _Unresolved:
            continue
    return assignments


def _tox_toml_command(table: dict[str, Any], file: str) -> Found | None:
    """tox 4's native TOML: `env_run_base` (or a test env under `env`) with `commands` as lists of words."""
    environments = table.get("env") if isinstance(table.get("env"), dict) else {}
    candidates = [("env_run_base", table.get("env_run_base"))]
    candidates += [(f"env.{name}", environments.get(name)) for name in TOX_ENVIRONMENTS]
    for where, environment in candidates:
        if not isinstance(environment, dict) or not isinstance(environment.get("commands"), list):
            continue
        directory = _inside(str(environment.get("change_dir", ".")).replace("{tox_root}", "."))
        if directory is None:
            continue
        root = _relative_root(directory)
        for words in environment["commands"]:
            line = _toml_command_words(words, root)
            command = runner_command(line) if line is not None else None
            if command is not None:
                return in_directory(directory, command), f"{file} [{where}] commands"
    return None


def _toml_command_words(words: Any, root: str) -> str | None:
    if not isinstance(words, list):
        return None
    kept: list[str] = []
    for word in words:
        if isinstance(word, dict) and word.get("replace") == "posargs":
            default = word.get("default", [])
            kept += [str(each) for each in default] if isinstance(default, list) else []
        elif isinstance(word, str):
            try:
                kept.append(_tox_substitute(word, root, lambda _name, _option: None))
            except _Unresolved:
                return None
        else:
            return None
    return shlex.join(kept)


def _reader(root: Path) -> Read:
    """The worktree's files as the shared readers take them (agent/gate/tooling_files.py)."""
    return lambda path: read_regular(root / path) or None


def tox_command(root: Path) -> Found | None:
    """The test environment's first runner line: tox.ini, setup.cfg's [tox:tox], pyproject.toml or tox.toml."""
    read = _reader(root)
    for file, parser in tox_inis(read):
        found = _tox_ini_command(parser, file)
        if found is not None:
            return found
    for file, table in tox_tables(read, skip_invalid=True):  # a file that is not TOML names no command
        found = _tox_toml_command(table, file)
        if found is not None:
            return found
    return None


def _session_runs(function: ast.FunctionDef) -> Iterator[tuple[str, str]]:
    """(directory, line) for each `session.run("word", ...)` of literal words, after its `session.chdir(...)`."""
    directory = "."
    calls = [node for node in ast.walk(function) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)]
    for call in sorted(calls, key=lambda node: (node.lineno, node.col_offset)):
        literal = [arg.value for arg in call.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
        starred = [arg for arg in call.args if isinstance(arg, ast.Starred)]  # *session.posargs: left out
        if len(literal) + len(starred) != len(call.args) or not literal:
            continue
        if call.func.attr == "chdir":
            directory = literal[0]
        elif call.func.attr == "run":
            yield directory, shlex.join(literal)


def nox_command(root: Path) -> Found | None:
    """The first runner line of nox's test session (tests, test, unit, ...), read from noxfile.py's syntax."""
    sessions, _lists = nox_sessions(_reader(root))
    chosen = [name for name in NOX_SESSIONS if name in sessions]
    chosen += [name for name in sessions if "test" in name and name not in chosen]
    for name in chosen:
        for directory, line in _session_runs(sessions[name]):
            command, inside = runner_command(line), _inside(directory)
            if command is not None and inside is not None:
                return in_directory(inside, command), f"noxfile.py session {name}"
    return None


def _make_variables(text: str) -> dict[str, str]:
    variables = {}
    for line in text.splitlines():
        match = _MAKE_ASSIGNMENT.match(line)
        if match and not line.startswith("\t"):
            variables.setdefault(match.group(1), match.group(2))
    return variables


def _expand_make(line: str, variables: dict[str, str]) -> str | None:
    for _ in range(SUBSTITUTION_PASSES):
        line, replaced = _MAKE_VARIABLE.subn(lambda match: variables.get(match.group(1), match.group(0)), line)
        if not replaced:
            break
    return None if "$(" in line or "${" in line else line


def make_test_recipe(text: str) -> list[str] | None:
    """The recipe lines of the `test` target (continuations joined), None when there is no such target."""
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if re.match(r"^test\s*:(?!=)", line):
            recipe = []
            for following in lines[number + 1 :]:
                if not following.startswith("\t"):
                    if following.strip() and not following.lstrip().startswith("#"):
                        break
                    continue
                recipe.append(following[1:])
            return list(_lines("\n".join(recipe)))
    return None


def _script_of(line: str) -> str | None:
    """The shell script a line runs (`bash scripts/test.sh "$@"`, `./scripts/test.sh`), as the line names it."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    if words[:1] and words[0] in SHELLS:
        words = words[1:]
    return words[0] if words and words[0].endswith(".sh") else None


def _no_link_on_the_way(root: Path, relative: str) -> bool:
    """No folder on the way to `relative` (inside `root`) is a link: a link would lead the read out of it."""
    parts = Path(relative).parts
    return not any(os.path.islink(root.joinpath(*parts[:depth])) for depth in range(1, len(parts)))


def _script_command(root: Path, directory: str, line: str) -> Found | None:
    """The runner line of the repository's script that `line` runs from `directory`, the script's exports of
    literal values in front; None for a line that runs no such script, or a script that changes directory first
    (its runner line would not run where the script says)."""
    script = _script_of(line)
    relative = _inside(posixpath.join(directory, script)) if script is not None else None
    if relative is None or not _no_link_on_the_way(root, relative):
        return None
    exports: list[str] = []
    for text in _lines(read_regular(root / relative, MAX_SCRIPT_BYTES)):
        export = _EXPORT.match(text)
        if export is not None:
            value = export.group(2)
            # A value made from the shell's own variables or commands cannot be known here: left out.
            if not any(character in value for character in "$`"):
                exports.append(f"{export.group(1)}={value}")
            continue
        if text.split()[0] in ("cd", "pushd"):
            return None
        command = runner_command(" ".join([*exports, text]))
        if command is not None:
            return command, relative
    return None


def _line_command(root: Path, directory: str, line: str) -> Found | None:
    """(command, script) for a line that runs a test runner itself (script "") or through a script of the
    repository, as run from `directory`."""
    command = runner_command(line)
    if command is not None:
        return command, ""
    return _script_command(root, directory, line)


def _with_script(where: str, script: str) -> str:
    return f"{where} ({script})" if script else where


def makefile_command(root: Path) -> Found | None:
    """The first runner line of the Makefile's `test` recipe, its simple variables expanded."""
    text = read_regular(root / "Makefile")
    recipe = make_test_recipe(text)
    if not recipe:
        return None
    variables = _make_variables(text)
    for line in recipe:
        expanded = _expand_make(line, variables)
        found = _line_command(root, ".", expanded) if expanded is not None else None
        if found is not None:
            return found[0], _with_script("Makefile target test", found[1])
    return None


def _step_commands(root: Path, script: Any, directory: Any) -> Iterator[Found]:
    """(command, script followed) for each runner line of a CI step's or job's script."""
    inside = _inside(directory) if isinstance(directory, str) and "${{" not in directory else "."
    scripts = script if isinstance(script, list) else [script]
    for text in scripts:
        if not isinstance(text, str) or inside is None:
            continue
        for line in _lines(text):
            found = _line_command(root, inside, line) if "${{" not in line else None
            if found is not None:
                yield in_directory(inside, found[0]), found[1]


def _github_command(root: Path, document: Any, file: str) -> Found | None:
    jobs = document.get("jobs") if isinstance(document, dict) else None
    if not isinstance(jobs, dict):
        return None
    named = [(str(key), job) for key, job in jobs.items() if isinstance(job, dict)]
    # Jobs that say they test first, then the rest, each in the file's order.
    ordered = sorted(named, key=lambda item: "test" not in f"{item[0]} {item[1].get('name', '')}".lower())
    for key, job in ordered:
        defaults = job.get("defaults", {}).get("run", {}) if isinstance(job.get("defaults"), dict) else {}
        steps = job.get("steps") if isinstance(job.get("steps"), list) else []
        for step in steps:
            if not isinstance(step, dict) or "run" not in step:
                continue
            directory = step.get("working-directory", defaults.get("working-directory", "."))
            for command, followed in _step_commands(root, step["run"], directory):
                label = f" step {step['name']!r}" if isinstance(step.get("name"), str) else ""
                return command, _with_script(f"{file} job {key}{label}", followed)
    return None


def _gitlab_command(root: Path, document: Any) -> Found | None:
    if not isinstance(document, dict):
        return None
    jobs = [(str(key), job) for key, job in document.items() if isinstance(job, dict) and "script" in job]
    for key, job in sorted(jobs, key=lambda item: "test" not in item[0].lower()):
        for command, followed in _step_commands(root, job["script"], "."):
            return command, _with_script(f".gitlab-ci.yml job {key}", followed)
    return None


def _workflow_files(root: Path) -> list[Path]:
    folder = root / ".github" / "workflows"
    if any(os.path.islink(path) for path in (root / ".github", folder)) or not folder.is_dir():
        return []
    with os.scandir(folder) as entries:
        names = sorted(entry.name for entry in entries if entry.name.endswith((".yml", ".yaml")))
    return [folder / name for name in names[:MAX_WORKFLOWS]]


def ci_command(root: Path) -> Found | None:
    """The first runner line of a CI test step: GitHub workflows (jobs named for tests first), then GitLab CI."""
    for path in _workflow_files(root):
        document = workflow(read_regular(path, MAX_WORKFLOW_BYTES, whole=True) or None)
        found = _github_command(root, document, f".github/workflows/{path.name}")
        if found is not None:
            return found
    gitlab = workflow(read_regular(root / ".gitlab-ci.yml", MAX_WORKFLOW_BYTES, whole=True) or None)
    return _gitlab_command(root, gitlab)
