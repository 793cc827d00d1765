"""One line of a repository's own test instructions (a tox `commands` line, a Makefile recipe line, a nox
`session.run`, a CI step's `run` line) as a command the gate can run in the built environment, or None when the
line does not run a test runner.

The environment is built before the tests run and the sandbox has no network, so whatever would install or sync
at test time is taken off: `uv run`, `poetry run`, `pdm run`, `pipenv run`, `coverage run` (and pytest's `--cov`
options, whose plugin may not be there). tox, nox and pip lines are never runner lines. Lines are only parsed here,
on the host; the command runs in the sandbox.
"""

from __future__ import annotations

import re
import shlex

PYTHON = "python3"
# `python -m X` that runs tests (django only as `python -m django test`).
RUNNER_MODULES = ("pytest", "py.test", "unittest", "nose2", "twisted.trial")
RUNNER_PROGRAMS = {"pytest": "pytest", "py.test": "pytest", "nose2": "nose2", "trial": "twisted.trial"}
# Wrappers whose job (syncing an environment) is already done; what follows them is the command.
WRAPPERS = {("uv", "run"), ("poetry", "run"), ("pdm", "run"), ("pipenv", "run"), ("rye", "run")}
# Their options that take a value as the next word.
WRAPPER_VALUE_OPTIONS = {"--with", "--extra", "--group", "--python", "-p", "--package", "--env-file", "--directory"}
PYTHON_VALUE_OPTIONS = {"-W", "-X"}
COVERAGE_VALUE_OPTIONS = {"--rcfile", "--source", "--include", "--omit", "--data-file", "--context", "--concurrency"}
# pytest options dropped from a project's own line, and which of them take a value as the next word.
PYTEST_VALUED = {"--cov", "--cov-report", "--cov-config", "--cov-fail-under", "--cov-context", "--junitxml"}
PYTEST_VALUED |= {"--junit-xml", "--maxfail", "--junit-prefix"}
PYTEST_FLAGS_DROPPED = {"-x", "--exitfirst", "--sw", "--stepwise", "--sw-skip", "--stepwise-skip", "--lf"}
PYTEST_FLAGS_DROPPED |= {"--last-failed", "--pdb", "--trace", "-f", "--looponfail"}
SHELL_OPERATORS = {"&&", "||", ";", "|", "&"}
# Where bytecode goes is the gate's (agent/gate/suite.py: its own cache, never the worktree), so a project's
# word on it is left out: Django's tox sets PYTHONDONTWRITEBYTECODE=1, which made every manage.py its tests start
# compile Django again from source.
GATE_OWNED_VARIABLES = {"PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"}
# A script's own arguments (`pytest ${@}` in scripts/test.sh): the gate passes none, so they expand to nothing.
SCRIPT_ARGUMENTS = {"$@", "${@}", "$*", "${*}"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_INTERPRETER = re.compile(r"^(?:.*/)?python(?:\d+(?:\.\d+)?)?$")
# A substitution left unresolved (tox's `{posargs}`, a template's `{{ python }}`): not a command as it stands.
_PLACEHOLDER = re.compile(r"\{\{?\s*[\w:.\-\[\]]+\s*\}?\}")


def _split(line: str) -> list[str] | None:
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # an unclosed quote
        return None
    for position, word in enumerate(words):  # only the first command of a list or a pipeline
        if word in SHELL_OPERATORS or word.startswith((">", "<", "2>")):
            words = words[:position]
            break
    return [word for word in words if word not in SCRIPT_ARGUMENTS]


def _drop_options(words: list[str], valued: set[str], stop: str = "") -> list[str]:
    """Leading options (and the values of those that take one) off the front of `words`, up to `stop`."""
    while words and words[0].startswith("-") and words[0] != stop:
        option = words.pop(0)
        if option in valued and words:
            words.pop(0)
    return words


def _pytest_arguments(words: list[str]) -> list[str]:
    """pytest's arguments without those that would change what the gate sees: coverage (its plugin may not be
    there), a report of the project's own (the gate's JUnit report is the one), and stopping or selecting early
    (-x, --maxfail, --stepwise, --last-failed: a baseline must run every test), or waiting on a debugger."""
    kept: list[str] = []
    words = list(words)
    while words:
        word = words.pop(0)
        name, equals, _value = word.partition("=")
        if name in PYTEST_VALUED or name.startswith(("--cov", "--no-cov")):
            # `--cov` takes its source only when one follows.
            if name in PYTEST_VALUED and not equals and words and not (name == "--cov" and words[0].startswith("-")):
                words.pop(0)
            continue
        if word in PYTEST_FLAGS_DROPPED:
            continue
        if word in ("-o", "--override-ini") and words and words[0].startswith("junit_"):
            words.pop(0)
            continue
        if re.fullmatch(r"-[xvsql]{2,}", word):  # combined flags: -xv is -x -v
            word = word.replace("x", "")
        kept.append(word)
    return kept


def _runner(words: list[str]) -> list[str] | None:
    """The runner invocation in `words` as `python3 ...` (or go/cargo/npm), None when there is none."""
    if len(words) >= 2 and (words[0], words[1]) in WRAPPERS:
        return _runner(_drop_options(words[2:], WRAPPER_VALUE_OPTIONS))
    if words[:2] == ["coverage", "run"]:
        rest = _drop_options(words[2:], COVERAGE_VALUE_OPTIONS, stop="-m")
        return _runner([PYTHON, *rest]) if rest else None
    if words and words[0] in RUNNER_PROGRAMS:
        return _runner([PYTHON, "-m", RUNNER_PROGRAMS[words[0]], *words[1:]])
    if words and _INTERPRETER.match(words[0]):
        rest = _drop_options(words[1:], PYTHON_VALUE_OPTIONS, stop="-m")
        flags = words[1 : len(words) - len(rest)]  # the interpreter's own (-W error, -X dev) stay
        if rest[:3] == ["-m", "coverage", "run"]:
            return _runner(["coverage", *rest[2:]])
        if len(rest) >= 2 and rest[0] == "-m" and rest[1] in RUNNER_MODULES:
            module = "pytest" if rest[1] == "py.test" else rest[1]
            arguments = _pytest_arguments(rest[2:]) if module == "pytest" else rest[2:]
            return [PYTHON, *flags, "-m", module, *arguments]
        if rest[:3] == ["-m", "django", "test"]:
            return [PYTHON, *flags, *rest]
        if rest and (rest[0].endswith("runtests.py") or (rest[0].endswith("manage.py") and rest[1:2] == ["test"])):
            return [PYTHON, *flags, *rest]
        return None
    if words[:2] in (["go", "test"], ["cargo", "test"], ["npm", "test"]) or words[:3] == ["npm", "run", "test"]:
        return words
    return None


def runner_command(line: str) -> str | None:
    """`PYTHONPATH=. coverage run -m pytest --cov=pkg tests` -> `PYTHONPATH=. python3 -m pytest tests`."""
    words = _split(line.strip().lstrip("@-+ ").strip())
    if not words or any(_PLACEHOLDER.search(word) for word in words):
        return None
    assignments = []
    while words and _ASSIGNMENT.match(words[0]):
        assignments.append(words.pop(0))
    if words[:1] == ["env"]:  # `env VAR=x pytest`
        words.pop(0)
        while words and _ASSIGNMENT.match(words[0]):
            assignments.append(words.pop(0))
    runner = _runner(words) if words else None
    if runner is None:
        return None
    kept = [assignment for assignment in assignments if assignment.partition("=")[0] not in GATE_OWNED_VARIABLES]
    return shlex.join([*kept, *runner])


def in_directory(directory: str, command: str) -> str:
    """The command run from `directory` (relative to the repository), or as it is for the repository's top."""
    directory = directory.strip().rstrip("/")
    if directory in ("", "."):
        return command
    return f"cd {shlex.quote(directory)} && {command}"
