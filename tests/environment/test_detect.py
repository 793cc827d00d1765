"""Python detection: the dependencies as the union of everything the repository says (metadata, requirements files
and their includes, tox, nox, CI workflows), what goes into the image's digest, and the Python the base needs.
All of it decided on the host from committed files, none of them run."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from test_sources import commands, plan_of

from agent.environment.plan import EnvironmentPlan
from agent.environment.poetry import constraint
from agent.protocol.environment import EnvironmentSpec
from sandbox.suites import image_for_suite

from support.repos import git as run_git
from support.repos import make_repo

SETUP_PY_READING_ITS_VERSION = """import os
from setuptools import setup

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "src", "pkg", "VERSION")) as handle:
    version = handle.read().strip()
with open(os.path.join(here, "README.md")) as handle:
    readme = handle.read()
EXTRAS = {"socks": ["PySocks"], "test": ["pytest-mock"]}
setup(name="pkg", version=version, long_description=readme, install_requires=["urllib3"], extras_require=EXTRAS,
      python_requires=">=3.8")
"""
SETUP_PY_PROJECT = {
    "setup.py": SETUP_PY_READING_ITS_VERSION,
    "src/pkg/VERSION": "1.0\n",
    "src/pkg/__init__.py": "",
    "README.md": "pkg\n",
}


def union_line(plan: EnvironmentPlan) -> list[str]:
    """The words of the first `uv pip install` of the install step: the one resolution of every source."""
    (step,) = [step for step in plan.steps if step.name.startswith("python: install")]
    first = re.search(r"uv pip install (.*?)(; then|$)", step.command)
    assert first is not None, step.command
    return shlex.split(first.group(1))


def commit(repo: Path, files: dict[str, str], message: str = "change") -> None:
    for name, content in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(content)
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-qm", message)


def test_setup_py_install_requires_and_requirements_dev_are_installed_together(tmp_path: Path) -> None:
    """The requests shape: requirements-dev.txt alone was used and `No module named 'urllib3'` followed."""
    files = {**SETUP_PY_PROJECT, "requirements-dev.txt": "-e .[socks]\npytest-httpbin==2.1.0\n"}
    plan = plan_of(make_repo(tmp_path / "requests-like", files))
    words = union_line(plan)
    assert words[:2] == ["-r", "setup.py"], "the runtime requirements first"
    assert {"-r setup.py", "--extra test", "--extra socks", "-r requirements-dev.txt"} <= set(
        " ".join(pair) for pair in zip(words[::2], words[1::2], strict=False)
    ), words
    assert plan.tree_files["requirements-dev.txt"] == b"pytest-httpbin==2.1.0\n", "the project itself is not installed"
    (metadata,) = [step for step in plan.steps if step.name == "python: the project's metadata"]
    assert "attempt /run/refactor-agent/uv pip install --no-deps -e /workspace ||" in metadata.command


def test_pep_621_dependencies_and_requirements_tests_are_one_union(tmp_path: Path) -> None:
    """The shape where PEP 621 won and requirements-tests.txt was ignored: 433 collection errors."""
    files = {
        "pyproject.toml": '[project]\nname = "p"\nversion = "1"\ndependencies = ["attrs"]\n',
        "requirements-tests.txt": "hypothesis\npytest-xdist\n",
        "requirements-docs.txt": "sphinx<5\n",
    }
    words = union_line(plan_of(make_repo(tmp_path / "p", files)))
    assert words == ["-r", "pyproject.toml", "-r", "requirements-tests.txt"], "docs pins would only fail the union"


def test_includes_are_followed_inside_the_repository_and_nothing_leads_out_of_it(tmp_path: Path) -> None:
    files = {
        "requirements/test.txt": (
            "-r base.txt\n-c ../constraints.txt\n-r ../../outside.txt\n--index-url https://evil.example/simple\n"
            "pytest \\\n  >=7\n"
        ),
        "requirements/base.txt": "-r ../extras/sqlalchemy.txt\nattrs\n",
        "extras/sqlalchemy.txt": "sqlalchemy<3\n-r ../requirements/base.txt\n",  # a cycle ends
        "constraints.txt": "attrs<30\n",
        "requirements/docs.txt": "sphinx\n",
    }
    plan = plan_of(make_repo(tmp_path / "nested", files))
    assert {"requirements/test.txt", "requirements/base.txt", "extras/sqlalchemy.txt", "constraints.txt"} <= set(
        plan.tree_files
    )
    assert "requirements/docs.txt" not in plan.tree_files
    assert plan.tree_files["requirements/test.txt"] == b"-r base.txt\n-c ../constraints.txt\npytest    >=7\n"
    assert union_line(plan) == ["-r", "requirements/base.txt", "-r", "requirements/test.txt"]
    assert "`-r ../../outside.txt` names no file of the repository, left out" in commands(plan)
    assert "`--index-url` ignored: the build uses the configured indexes" in commands(plan)


TOX_INI = """[tox]
envlist = py311, lint

[base]
deps =
    pytest-timeout

[testenv]
deps =
    -r{toxinidir}/ci/tox-requirements.txt
    pytest-cov>=4  # coverage in CI
    py38: importlib-metadata
    {[base]deps}
    {env:EXTRA_DEPS}
commands = pytest {posargs}

[testenv:all]
extras = testing

[testenv:docs]
extras = docs
deps = sphinx

[testenv:lint]
deps = flake8
"""
NOXFILE = """import os

import nox

os.system("touch {marker}")
TEST_DEPS = ["freezegun"]


@nox.session(python=["3.11", "3.12"])
def tests(session):
    session.install("-e", ".[test]", "hypothesis", *TEST_DEPS)
    session.run("pytest")


@nox.session
def lint(session):
    session.install("ruff")
"""


def test_tox_deps_and_nox_test_sessions_are_parsed_and_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "noxfile-ran"
    files = {
        "pyproject.toml": (
            '[project]\nname = "t"\nversion = "1"\n[project.optional-dependencies]\n'
            'testing = ["mock"]\ntest = ["pytest-mock"]\ndocs = ["sphinx"]\n'
        ),
        "tox.ini": TOX_INI,
        "ci/tox-requirements.txt": "pytest-randomly\n",
        "noxfile.py": NOXFILE.format(marker=marker),
    }
    plan = plan_of(make_repo(tmp_path / "t", files))
    words = union_line(plan)
    for expected in ("--extra", "test", "testing", "-r", "ci/tox-requirements.txt", "pytest-cov>=4", "hypothesis"):
        assert expected in words, (expected, words)
    assert "pytest-timeout" in words, "{[base]deps} is that section's deps"
    assert "freezegun" in words, "a module-level list spread into session.install"
    for unexpected in ("flake8", "ruff", "importlib-metadata", "sphinx", "docs", "{"):
        assert unexpected not in " ".join(words), unexpected
    assert not marker.exists(), "noxfile.py was executed"
    assert {"tox.ini", "noxfile.py", "ci/tox-requirements.txt"} <= set(plan.tree_files)


WORKFLOW = """name: CI
on: [push]
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - run: python -m pip install --upgrade pip
      - run: |
          pip install -r ci/reqs.txt pytest-timeout "coverage[toml]" ${{ matrix.extra }} \\
            --extra-index-url https://example.org/simple trustme
          pytest
"""
GITLAB = """test:
  script:
    - python3 -m pip install mock && pytest
"""
# Nine levels of nine aliases: a few hundred bytes that expand to 9**9 strings if walked naively.
BILLION_LAUGHS = "a: &a [run, run, run, run, run, run, run, run, run]\n" + "".join(
    f"{chr(98 + level)}: &{chr(98 + level)} [{', '.join(['*' + chr(97 + level)] * 9)}]\n" for level in range(8)
)


def test_ci_install_lines_count_only_when_nothing_else_names_test_dependencies(tmp_path: Path) -> None:
    files = {
        "setup.py": "from setuptools import setup\nsetup(name='c', install_requires=['idna'])\n",
        ".github/workflows/ci.yml": WORKFLOW,
        ".github/workflows/bomb.yaml": BILLION_LAUGHS,
        ".github/workflows/broken.yml": "jobs: [unclosed\n",
        ".github/workflows/huge.yml": "run: pip install never-read\n" + "#" * 300_000 + "\n",
        ".gitlab-ci.yml": GITLAB,
        "ci/reqs.txt": "responses\n",
    }
    repo = make_repo(tmp_path / "c", files)
    plan = plan_of(repo)
    words = union_line(plan)
    assert words[:2] == ["-r", "setup.py"]
    for expected in ("-r", "ci/reqs.txt", "pytest-timeout", "coverage[toml]", "trustme", "mock"):
        assert expected in words, (expected, words)
    assert "pip" not in words and not any("$" in word or "example.org" in word for word in words), words
    assert ".github/workflows/ci.yml" in plan.tree_files and ".github/workflows/bomb.yaml" not in plan.tree_files
    assert "never-read" not in words, "a workflow over 256 KiB is not read"
    commit(repo, {"requirements-test.txt": "pytest-mock\n"})
    assert union_line(plan_of(repo)) == ["-r", "setup.py", "-r", "requirements-test.txt"]


def test_the_digest_covers_what_decides_the_dependencies_and_no_other_file(tmp_path: Path) -> None:
    files = {**SETUP_PY_PROJECT, "src/pkg/core.py": "X = 1\n"}
    repo = make_repo(tmp_path / "digest", files)
    plan = plan_of(repo)
    assert plan.needs_snapshot, "the metadata build sees the committed tree"
    assert set(plan.tree_files) == {"setup.py", "src/pkg/VERSION"}, "read by setup.py; the README decides nothing"
    first = plan.digest("sha256:base", "0.9")
    commit(repo, {"src/pkg/core.py": "X = 2\n", "README.md": "pkg, described\n"})
    assert plan_of(repo).digest("sha256:base", "0.9") == first, "source and prose edits reuse the image"
    commit(repo, {"src/pkg/VERSION": "1.1\n"})
    assert plan_of(repo).digest("sha256:base", "0.9") != first, "the version is the project's metadata"

    dynamic = make_repo(
        tmp_path / "dynamic",
        {
            "pyproject.toml": (
                '[project]\nname = "d"\ndynamic = ["version", "dependencies"]\n'
                '[tool.setuptools.dynamic]\nversion = {attr = "d.__version__"}\n'
                'dependencies = {file = ["deps/runtime.in"]}\nreadme = {file = ["README.rst"]}\n'
            ),
            "src/d/__init__.py": "__version__ = '3'\n",
            "deps/runtime.in": "idna\n",
            "README.rst": "d\n",
        },
    )
    assert set(plan_of(dynamic).tree_files) == {"pyproject.toml", "src/d/__init__.py", "deps/runtime.in"}

    flit = '[build-system]\nbuild-backend = "flit_core.buildapi"\n[project]\nname = "f"\n'
    static = make_repo(tmp_path / "flit", {"pyproject.toml": flit + 'version = "1"\n', "f.py": "X = 1\n"})
    assert set(plan_of(static).tree_files) == {"pyproject.toml"}, "a static version does not come from the module"
    from_module = make_repo(tmp_path / "flit-dynamic", {"pyproject.toml": flit + 'dynamic = ["version"]\n', "f.py": ""})
    assert set(plan_of(from_module).tree_files) == {"pyproject.toml", "f.py"}


@pytest.mark.parametrize(
    ("declaration", "image", "why"),
    [
        ('[project]\nname = "n"\nversion = "1"\nrequires-python = ">=3.12"\n', image_for_suite("trixie"), "3.13"),
        ('[project]\nname = "n"\nversion = "1"\nrequires-python = ">=3.8"\n', "refactor-agent-sandbox:latest", ""),
        ('[tool.poetry]\nname = "n"\n[tool.poetry.dependencies]\npython = "^3.12"\nidna = "^3.4"\n',
         image_for_suite("trixie"), "3.13"),
        ('[project]\nname = "n"\nversion = "1"\nrequires-python = "<3"\n', "refactor-agent-sandbox:latest",
         "no Python of ours meets requires-python <3"),
    ],
)  # fmt: skip
def test_requires_python_chooses_the_base_whose_python_meets_it(
    tmp_path: Path, declaration: str, image: str, why: str
) -> None:
    repo = make_repo(tmp_path / "n", {"pyproject.toml": declaration})
    plan = plan_of(repo)
    assert plan.base_image == image, plan.description
    assert why in plan.description
    table = plan_of(repo, spec=EnvironmentSpec(base_image="ci:py3.12"))
    assert table.base_image == "ci:py3.12", "a base the user names wins"


def test_poetry_pdm_hatch_and_pipfile_tables_become_requirements(tmp_path: Path) -> None:
    pyproject = """[tool.poetry]
name = "po"
[tool.poetry.dependencies]
python = "^3.9"
requests = "^2.31"
rich = {version = "~13.7", extras = ["jupyter"]}
sibling = {path = "../sibling"}
optional-thing = {version = "*", optional = true}
[tool.poetry.group.test.dependencies]
pytest = "^8.0.0"
[tool.pdm.dev-dependencies]
test = ["freezegun>=1", "-e file:///${PROJECT_ROOT}/plugins/x"]
[tool.hatch.envs.hatch-test]
extra-dependencies = ["pytest-xdist", "{root:uri}/local"]
"""
    words = union_line(
        plan_of(make_repo(tmp_path / "po", {"pyproject.toml": pyproject, "Pipfile": "[dev-packages]\nwebtest = '*'\n"}))
    )
    assert words == [
        "requests>=2.31,<3",
        "rich[jupyter]>=13.7,<13.8",
        "pytest>=8.0.0,<9",
        "freezegun>=1",
        "pytest-xdist",
        "webtest",
    ]
    assert (constraint("^0.2.3"), constraint("~1"), constraint("1.2.*"), constraint(">=1 <2")) == (
        ">=0.2.3,<0.3",
        ">=1,<2",
        "==1.2.*",
        ">=1,<2",
    )
    assert constraint("^1 || ^2") is None


def test_a_version_from_git_is_pretended_from_the_nearest_tag(tmp_path: Path) -> None:
    files = {
        "pyproject.toml": (
            '[build-system]\nrequires = ["setuptools>=64", "setuptools-scm>=8"]\n'
            '[project]\nname = "s"\ndynamic = ["version"]\n[tool.setuptools_scm]\n'
        )
    }
    repo = make_repo(tmp_path / "scm", files)
    assert "export SETUPTOOLS_SCM_PRETEND_VERSION=0.0.0 " in commands(plan_of(repo)), "no tag yet"
    run_git(repo, "tag", "v2.3.0")
    commit(repo, {"s.py": ""}, "after the release")
    assert "export SETUPTOOLS_SCM_PRETEND_VERSION=2.3.0 " in commands(plan_of(repo))


def test_extras_a_setup_py_computes_are_taken_from_what_other_files_name(tmp_path: Path) -> None:
    files = {
        "setup.py": "from setuptools import setup\nimport extras\nsetup(name='k', **extras.KWARGS)\n",
        "tox.ini": "[testenv]\nextras = tests\n",
    }
    words = union_line(plan_of(make_repo(tmp_path / "k", files)))
    assert words == ["-r", "setup.py", "--extra", "tests"]


def test_a_requirements_file_name_cannot_drive_the_terminal(tmp_path: Path) -> None:
    plan = plan_of(make_repo(tmp_path / "esc", {"requirements-\x1b]0;owned\x07.txt": "six\n"}))
    assert "\x1b" not in plan.description and "\x07" not in plan.description
    assert all("\x1b" not in step.name for step in plan.steps)
    assert "requirements-\\x1b]0;owned\\x07.txt" in plan.description
