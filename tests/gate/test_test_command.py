"""Which command runs a repository's tests, and why: the user's setting, tox, nox, a Makefile, CI, known runners.

Each test writes the files a real project keeps (Django's tox.ini and runtests.py, a noxfile, a CI workflow) and
checks the command the gate would run in the sandbox and the source the summary names.
"""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from agent.environment.committed import committed_tree
from agent.environment.test_tooling import nox_requirements
from agent.gate.runner_line import runner_command
from agent.gate.test_command import SuiteCommand, choose_test_command, detect_test_command
from agent.gate.test_command_sources import nox_command
from agent.gate.tooling_files import MAX_NOXFILE_BYTES
from agent.server.doctor import DoctorOptions, run_doctor

from support.repos import make_repo


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)
    return root


# Django's own layout: the runner is tests/runtests.py, named by tox.ini's test environment, run from tests/.
DJANGO_TOX = """
[tox]
minversion = 4.0
envlist = py3, flake8, docs

[testenv]
usedevelop = false
passenv = DJANGO_SETTINGS_MODULE,PYTHONPATH
setenv =
    PYTHONDONTWRITEBYTECODE=1
deps =
    -e .
    py{3,310,311}: -rtests/requirements/py3.txt
changedir = tests
commands =
    {envpython} runtests.py {posargs}

[testenv:flake8]
changedir = {toxinidir}
commands = flake8 .
"""


SUBSTITUTIONS_TOX = (
    "[testenv]\nsetenv =\n    PYTHONPATH = {toxinidir}\n    TMP = {envtmpdir}\n    py38: OLD = 1\n"
    "commands =\n    pip install -e .\n    coverage run -m pytest {posargs:{toxinidir}/tests} \\\n"
    "        --cov=pkg --cov-report term\n    coverage report\n"
)
NAMED_ENVIRONMENT_TOX = (
    "[base]\ntest = python -m unittest discover -s tests\n"
    "[testenv]\ncommands = tox -e lint\n"
    "[testenv:lint]\ncommands = ruff check .\n"
    "[testenv:py]\ncommands =\n    {[base]test}\n"
)
NATIVE_TOX = (
    '[tool.tox]\nenv_list = ["3.13"]\n[tool.tox.env_run_base]\nchange_dir = "src"\n'
    'commands = [["pytest", { replace = "posargs", default = ["tests"], extend = true }]]\n'
)


@pytest.mark.parametrize(
    ("files", "command", "source"),
    [
        pytest.param(
            # The gate keeps bytecode out of the worktree itself; tox's PYTHONDONTWRITEBYTECODE would make each
            # manage.py the tests start compile Django again (15 s, not 3, on a loaded machine).
            {"tox.ini": DJANGO_TOX, "tests/runtests.py": "", "tests/basic/tests.py": "", "setup.py": ""},
            "cd tests && python3 runtests.py",
            "tox.ini [testenv] commands",
            id="the project's own runner named in tox.ini",
        ),
        pytest.param(
            {"tests/runtests.py": "", "tests/test_x.py": "import unittest\n"},
            "python3 tests/runtests.py",
            "tests/runtests.py (the project's own runner)",
            id="django's runtests.py without tox.ini",
        ),
        # {envtmpdir} cannot be known outside tox: that variable is left out, the rest stays.
        pytest.param(
            {"tox.ini": SUBSTITUTIONS_TOX},
            "PYTHONPATH=. OLD=1 python3 -m pytest ./tests",
            "tox.ini [testenv] commands",
            id="tox substitutions, installs and coverage",
        ),
        pytest.param(
            {"tox.ini": NAMED_ENVIRONMENT_TOX},
            "python3 -m unittest discover -s tests",
            "tox.ini [testenv:py] commands",
            id="a named test environment and a section reference",
        ),
        pytest.param(
            {"setup.cfg": "[tox:tox]\nenvlist = py3\n[testenv]\ncommands = pytest -ra {posargs}\n"},
            "python3 -m pytest -ra",
            "setup.cfg [testenv] commands",
            id="tox in setup.cfg",
        ),
        pytest.param(
            {"pyproject.toml": NATIVE_TOX},
            "cd src && python3 -m pytest tests",
            "pyproject.toml [tool.tox] [env_run_base] commands",
            id="tox 4's native TOML",
        ),
    ],
)
def test_tox_and_the_project_own_runner(tmp_path: Path, files: dict[str, str], command: str, source: str) -> None:
    _write(tmp_path, files)
    assert detect_test_command(tmp_path) == SuiteCommand(command=command, source=source)


NOXFILE = """
import nox

open(MARKER, "w").write("executed")  # never: the noxfile is parsed, not run


@nox.session(python=["3.11", "3.12"])
def lint(session):
    session.run("ruff", "check", ".")


@nox.session(python="3.12", name="tests")
def run_the_tests(session):
    session.install("-e", ".[test]")
    session.chdir("src")
    session.run("pytest", "-ra", *session.posargs)
"""


def test_nox_test_session_is_parsed_never_executed(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    _write(tmp_path, {"noxfile.py": NOXFILE.replace("MARKER", repr(str(marker)))})
    assert detect_test_command(tmp_path) == SuiteCommand(
        command="cd src && python3 -m pytest -ra", source="noxfile.py session tests"
    )
    assert not marker.exists()


def test_makefile_test_recipe_with_variables_and_an_install_step(tmp_path: Path) -> None:
    makefile = "PYTHON ?= python3.12\nPYTEST = $(PYTHON) -m pytest\n\n"
    makefile += "test: install\n\t@pip install -e .\n\t$(PYTEST) -q tests\n"
    _write(tmp_path, {"Makefile": makefile, "tests/test_x.py": ""})
    assert detect_test_command(tmp_path) == SuiteCommand(
        command="python3 -m pytest -q tests", source="Makefile target test"
    )


WORKFLOW = """
name: CI
on: [push]
jobs:
  lint:
    runs-on: ubuntu-latest
    steps:
      - run: python -m pytest --collect-only
  tests:
    runs-on: ubuntu-latest
    strategy:
      matrix:
        python: ["3.11", "3.12"]
    steps:
      - uses: actions/checkout@v4
      - name: Install
        run: |
          python -m pip install --upgrade pip
          pip install -e .[test]
      - name: Run tests
        working-directory: src
        run: |
          pytest ${{ matrix.extra }}
          python -m pytest -ra \\
            tests/unit
"""


def test_ci_workflow_test_step(tmp_path: Path) -> None:
    _write(tmp_path, {".github/workflows/ci.yml": WORKFLOW, "tests/test_x.py": ""})
    # Jobs named for tests come first; a line with a workflow expression cannot be run as it is.
    assert detect_test_command(tmp_path) == SuiteCommand(
        command="cd src && python3 -m pytest -ra tests/unit",
        source=".github/workflows/ci.yml job tests step 'Run tests'",
    )


# typer's shape: the CI step runs a script of the repository, which exports what the tests need and runs pytest.
TEST_SCRIPT = """#!/usr/bin/env bash

set -e
set -x

# For tests, a large terminal width
export TERMINAL_WIDTH=3000
export _FORCE_DISABLE_TERMINAL=1
export FROM_HOST="$HOME"
pytest --cov --cov-report=term-missing -o console_output_style=progress --numprocesses=auto ${@}
"""


def test_a_ci_step_running_a_script_of_the_repository_gives_the_script_runner_line_and_exports(
    tmp_path: Path,
) -> None:
    workflow = (
        "jobs:\n  test:\n    steps:\n      - name: Lint\n        run: bash scripts/lint.sh\n"
        "      - name: Test\n        run: bash scripts/test.sh\n"
    )
    _write(
        tmp_path,
        {
            ".github/workflows/test.yml": workflow,
            "scripts/lint.sh": "set -e\nmypy pkg\nruff check pkg\n",
            "scripts/test.sh": TEST_SCRIPT,
            "tests/test_x.py": "",
        },
    )
    # The exports with literal values go in front (one that reads the shell's variables cannot be known here);
    # the script's own arguments ("$@") and coverage's options are left out.
    assert detect_test_command(tmp_path) == SuiteCommand(
        command="TERMINAL_WIDTH=3000 _FORCE_DISABLE_TERMINAL=1 python3 -m pytest -o console_output_style=progress "
        "--numprocesses=auto",
        source=".github/workflows/test.yml job test step 'Test' (scripts/test.sh)",
    )
    # A Makefile's recipe running the script is followed the same way.
    _write(tmp_path, {"Makefile": "test:\n\t./scripts/test.sh -v\n"})
    assert detect_test_command(tmp_path).source == "Makefile target test (scripts/test.sh)"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "step",
    [
        "bash ../outside/test.sh",  # out of the repository
        "bash OUTSIDE/test.sh",  # an absolute path
        "bash linked/test.sh",  # through a folder that is a link
        "bash scripts/link.sh",  # a link itself
        "bash scripts/nested.sh",  # a script that runs a script: one level only
        "bash scripts/cd.sh",  # a script that changes directory before its runner line
    ],
)
def test_a_script_is_followed_only_inside_the_repository_and_never_through_a_link(tmp_path: Path, step: str) -> None:
    repository = tmp_path / "repository"
    outside = tmp_path / "outside"
    _write(outside, {"test.sh": "pytest outside\n"})
    _write(
        repository,
        {
            ".github/workflows/test.yml": "jobs:\n  test:\n    steps:\n      - run: "
            + step.replace("OUTSIDE", str(outside))
            + "\n",
            "scripts/nested.sh": "bash scripts/inner.sh\n",
            "scripts/inner.sh": "pytest inner\n",
            "scripts/cd.sh": "cd tests\npytest here\n",
            "tests/test_x.py": "",
            "pytest.ini": "[pytest]\n",
        },
    )
    (repository / "linked").symlink_to(outside)
    (repository / "scripts" / "link.sh").symlink_to(outside / "test.sh")
    assert detect_test_command(repository) == SuiteCommand(
        command="python3 -m pytest -q", source="pytest configured in pytest.ini"
    )


def test_hostile_workflows_are_capped_and_read_safely(tmp_path: Path) -> None:
    aliases = "a: &a [x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + level)}: &{chr(98 + level)} [{', '.join([f'*{chr(97 + level)}'] * 8)}]\n" for level in range(8)
    )
    _write(
        tmp_path,
        {
            ".github/workflows/a-bomb.yml": aliases + "jobs:\n  test:\n    steps:\n      - run: *i\n",
            ".github/workflows/b-object.yml": "!!python/object/apply:os.system ['touch pwned']\n",
            ".github/workflows/c-huge.yml": "jobs: {test: {steps: [{run: pytest}]}}\n" + "#" * 300_000,
            ".github/workflows/d-ok.yml": "jobs:\n  check:\n    steps:\n      - run: tox\n      - run: nose2 -v\n",
        },
    )
    assert detect_test_command(tmp_path) == SuiteCommand(
        command="python3 -m nose2 -v", source=".github/workflows/d-ok.yml job check"
    )
    assert not (tmp_path / "pwned").exists()


def test_the_order_user_setting_tox_makefile_ci_then_layout(tmp_path: Path) -> None:
    files = {
        ".github/workflows/ci.yml": "jobs:\n  test:\n    steps:\n      - run: pytest tests/ci\n",
        "tests/test_x.py": "import pytest\n",
        "pytest.ini": "[pytest]\n",
    }
    _write(tmp_path, files)
    assert detect_test_command(tmp_path).source == ".github/workflows/ci.yml job test"  # type: ignore[union-attr]
    _write(tmp_path, {"Makefile": "test:\n\tpytest tests/make\n"})
    assert detect_test_command(tmp_path).source == "Makefile target test"  # type: ignore[union-attr]
    _write(tmp_path, {"tox.ini": "[testenv]\ncommands = pytest tests/tox\n"})
    assert detect_test_command(tmp_path).source == "tox.ini [testenv] commands"  # type: ignore[union-attr]
    assert choose_test_command("make check", tmp_path) == SuiteCommand(command="make check", source="--test-cmd")


def test_unittest_projects_get_unittest_pytest_ones_pytest(tmp_path: Path) -> None:
    _write(tmp_path, {"tests/__init__.py": "", "tests/test_x.py": "import unittest\n\nclass T(unittest.TestCase):\n"})
    assert detect_test_command(tmp_path) == SuiteCommand(
        command="python3 -m unittest discover -s tests -t .", source="test files written for unittest"
    )
    _write(tmp_path, {"tests/test_y.py": "import pytest\n"})
    assert detect_test_command(tmp_path) == SuiteCommand(
        command="python3 -m pytest -q", source="test files (test_*.py) found"
    )
    _write(tmp_path, {"setup.cfg": "[tool:pytest]\naddopts = -ra\n"})
    assert detect_test_command(tmp_path) == SuiteCommand(
        command="python3 -m pytest -q", source="pytest configured in setup.cfg"
    )


@pytest.mark.parametrize(
    ("line", "command"),
    [
        ("pytest {posargs}", None),  # substitutions are the tox reader's: a brace left is not a runner's word
        ("py.test -ra tests", "python3 -m pytest -ra tests"),
        ("python -W error -m pytest", "python3 -W error -m pytest"),
        ("uv run --with pytest-xdist pytest -n 4", "python3 -m pytest -n 4"),
        ("poetry run python -m pytest --cov pkg tests", "python3 -m pytest tests"),
        ("python -m coverage run --source=pkg -m unittest discover", "python3 -m unittest discover"),
        ("coverage run --parallel-mode tests/runtests.py -v2", "python3 tests/runtests.py -v2"),
        ("env DJANGO_SETTINGS_MODULE=s python3.12 manage.py test", "DJANGO_SETTINGS_MODULE=s python3 manage.py test"),
        ("pytest tests && coverage report", "python3 -m pytest tests"),
        # Where bytecode goes is the gate's (its own cache, never the worktree): the project's word on it goes.
        ("PYTHONDONTWRITEBYTECODE=1 PYTHONPYCACHEPREFIX=/tmp/c A=1 python -m pytest", "A=1 python3 -m pytest"),
        ("env PYTHONDONTWRITEBYTECODE=x python3 runtests.py", "python3 runtests.py"),
        # What would stop a baseline early, write a report of its own or wait on a debugger goes.
        (
            "pytest -rxs -xv --no-cov-on-fail --junitxml=junit.xml -o junit_family=legacy --maxfail 3 --sw --pdb",
            "python3 -m pytest -rxs -v",
        ),
        ("pip install -e .", None),
        ("tox -e py", None),
        ("nox -s tests", None),
        ("python setup.py test", None),
        ('echo "unclosed', None),
        ("go test ./...", "go test ./..."),
    ],
)
def test_runner_lines(line: str, command: str | None) -> None:
    assert runner_command(line) == command


def test_doctor_repo_names_the_test_command_and_why(tmp_path: Path) -> None:
    _write(tmp_path, {"tox.ini": DJANGO_TOX, "tests/runtests.py": ""})
    options = DoctorOptions(server_url="http://127.0.0.1:9/v1", repo=tmp_path, check_docker=False)
    (found,) = [result for result in run_doctor(options) if result.name == "test-command"]
    assert (found.status, found.message) == (
        "ok",
        "cd tests && python3 runtests.py  (from tox.ini [testenv] commands)",
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    (nothing,) = [
        result for result in run_doctor(options.model_copy(update={"repo": empty})) if result.name == "test-command"
    ]
    assert nothing.status == "warn" and nothing.message.startswith("none found (tasks would be unverified)")


def test_the_test_command_and_the_test_dependencies_read_one_noxfile_by_the_same_rules(tmp_path: Path) -> None:
    """Both readers of a noxfile (which command runs the tests, what they need installed) take its sessions from
    agent/gate/tooling_files.py: the same session for both, and neither reads one over the size cap."""
    noxfile = (
        'import nox\n\n\n@nox.session(name="tests")\ndef run_them(session):\n'
        '    session.install("attrs")\n    session.run("pytest", "-q")\n'
    )
    repo = make_repo(tmp_path / "small", {"noxfile.py": noxfile})
    with committed_tree(git.Repo(repo)) as tree:
        assert nox_requirements(tree).lines == ["attrs"]
    assert nox_command(repo) == ("python3 -m pytest -q", "noxfile.py session tests")

    padded = noxfile + "#" * MAX_NOXFILE_BYTES + "\n"
    repo = make_repo(tmp_path / "large", {"noxfile.py": padded})
    with committed_tree(git.Repo(repo)) as tree:
        assert nox_requirements(tree).lines == []
    assert nox_command(repo) is None
