"""The environment stage with real Docker, real git and packages from the real index (through the host's network,
in the build only): built once, reused, rebuilt on a dependency change, a devcontainer's own Dockerfile, a
wheelhouse with no index at all, and a failing build that leaves the tasks unverified."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import git
import pytest
from typer.testing import CliRunner

from agent.bundle.manifest import Manifest, sha256_of
from agent.cli import app
from agent.environment.stage import prepare_environment
from agent.protocol.config import RunConfig
from agent.protocol.environment import EnvironmentSpec
from agent.protocol.records import EnvironmentRecord, RunSummary
from agent.server.doctor import check_environment
from sandbox import DEFAULT_IMAGE, DockerSandbox, docker_client
from sandbox.suites import image_for_suite

from support.environment_images import own_repository_name
from support.install_fixtures import SOURCE_ROOT
from support.repos import git as run_git
from support.repos import make_repo
from support.scripted_model import ScriptedModel, run_in_process
from support.scripted_server import Reply

pytestmark = pytest.mark.docker

# Tiny pure-Python wheels: iniconfig imported by the project's code, six by its tests only (a PEP 735 group).
PROJECT_FILES = {
    "src/tiny/__init__.py": (
        "import iniconfig\n\n\ndef sections(text):\n    return list(iniconfig.IniConfig('x.ini', data=text).sections)\n"
    ),
    "tests/test_tiny.py": (
        "import socket\n\nimport pytest\nimport six\nimport tiny\n\n\n"
        "def test_sections():\n    assert tiny.sections('[a]\\nk = v\\n') == ['a']\n\n\n"
        "def test_the_worktree_is_what_runs():\n    assert tiny.__file__.startswith('/workspace/src/')\n\n\n"
        "def test_six_from_the_tests_group():\n    assert six.PY3\n\n\n"
        "def test_no_network_at_run_time():\n"
        "    with pytest.raises(OSError):\n        socket.create_connection(('pypi.org', 443), timeout=5)\n"
    ),
    "pytest.ini": "[pytest]\naddopts = -p no:cacheprovider\n",
}
TESTS_IN_PROJECT = 4
TOUCH = Reply(tool_calls=[("create_file", {"path": "NOTES.md", "content": "checked\n"})])
FINISH = Reply(tool_calls=[("finish", {"summary": "Add notes"})])


def pyproject(name: str, dependencies: list[str]) -> str:
    quoted = ", ".join(f'"{dependency}"' for dependency in dependencies)
    return (
        f'[project]\nname = "{name}"\nversion = "0.1"\ndependencies = [{quoted}]\n\n'
        '[dependency-groups]\ntests = ["six"]\n'
    )


@pytest.fixture(scope="session")
def repository_name() -> Iterator[str]:
    with own_repository_name("tiny") as name:
        yield name


@pytest.fixture(autouse=True)
def pypi_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The builds use the real PyPI: no pip config file of this machine, no local find-links."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in list(os.environ):
        if name.startswith(("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "UV_")):
            monkeypatch.delenv(name)


def project(path: Path, name: str, dependencies: list[str], extra: dict[str, str] | None = None) -> Path:
    return make_repo(path / name, {**PROJECT_FILES, "pyproject.toml": pyproject(name, dependencies), **(extra or {})})


def run_once(tmp_path: Path, repo: Path, run_id: str, spec: EnvironmentSpec | None = None) -> tuple[RunSummary, list]:
    config = RunConfig(repo=repo, tasks=["Add notes"], runs_dir=tmp_path / "runs", max_turns=5, environment=spec)
    events: list = []
    summary = run_in_process(config, ScriptedModel([TOUCH, FINISH]), run_id=run_id, observe=events.append)
    return summary, events


def prepare(repo: Path, log: Path, spec: EnvironmentSpec | None = None) -> EnvironmentRecord:
    return prepare_environment(
        git.Repo(repo),
        client=docker_client(),
        sandbox_image=DEFAULT_IMAGE,
        image_explicit=False,
        spec=spec,
        test_command=None,
        log_path=log,
        progress=lambda _: None,
    )


def test_detected_environment_verifies_with_no_network_is_reused_and_rebuilt_on_a_change(
    tmp_path: Path, repository_name: str
) -> None:
    repo = project(tmp_path, repository_name, ["iniconfig"])
    first, events = run_once(tmp_path, repo, "first")
    environment = first.environment
    assert environment is not None and environment.status == "built", environment
    assert environment.source == "detected" and environment.tests_collected == TESTS_IN_PROJECT
    assert Path(environment.log or "") == tmp_path / "runs" / "first" / "env-build.log"
    network = next(line for line in Path(environment.log or "").read_text().splitlines() if "build network" in line)
    # The indexes, and Debian's mirror for the C build tools (the machine's own Debian mirrors too, if any).
    assert {"deb.debian.org:80", "files.pythonhosted.org:443", "pypi.org:443"} <= set(
        network.split("only ")[1].split(", ")
    ), network
    baseline = next(event for event in events if event.type == "baseline")
    assert baseline.result == f"{TESTS_IN_PROJECT} passed", baseline
    (task,) = first.tasks
    assert task.verdict == "verified", task.reason

    second, _ = run_once(tmp_path, repo, "second")
    assert second.environment is not None and second.environment.status == "reused"
    assert second.environment.image == environment.image
    assert not (tmp_path / "runs" / "second" / "env-build.log").exists(), "a reused image is not built again"

    # Source edits leave the image alone; a dependency change builds a new one.
    (repo / "src" / "tiny" / "extra.py").write_text("VALUE = 1\n")
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-qm", "source only")
    assert prepare(repo, tmp_path / "source.log").status == "reused"
    (repo / "pyproject.toml").write_text(pyproject(repository_name, ["iniconfig", "six"]))
    run_git(repo, "commit", "-qam", "a dependency more")
    rebuilt = prepare(repo, tmp_path / "rebuilt.log")
    assert rebuilt.status == "built" and rebuilt.image != environment.image
    assert rebuilt.tests_collected == TESTS_IN_PROJECT


def test_a_devcontainer_with_its_own_dockerfile_is_built_and_its_commands_run(
    tmp_path: Path, repository_name: str
) -> None:
    devcontainer = {
        ".devcontainer/Dockerfile": (
            f"FROM {DEFAULT_IMAGE}\nENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin\n"
        ),
        ".devcontainer/devcontainer.json": (
            "// the team's own description of its environment\n"
            '{\n  "build": {"dockerfile": "Dockerfile", "context": ".."},\n'
            "  /* uv is on the PATH while the build runs */\n"
            '  "onCreateCommand": "uv venv --system-site-packages $VIRTUAL_ENV",\n'
            '  "postCreateCommand": ["uv", "pip", "install", "iniconfig", "six"],\n}\n'
        ),
    }
    repo = project(tmp_path, f"{repository_name}-dc", ["iniconfig"], devcontainer)
    record = prepare(repo, tmp_path / "dc.log")
    assert record.status == "built" and record.source == "devcontainer", record
    assert record.tests_collected == TESTS_IN_PROJECT and record.collect_note == ""
    log = (tmp_path / "dc.log").read_text()
    assert "docker build of .devcontainer/Dockerfile" in log and "devcontainer: postCreateCommand" in log


def test_a_wheelhouse_builds_with_no_index_and_no_network(tmp_path: Path, repository_name: str) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--only-binary",
            ":all:",
            "-q",
            "-d",
            str(wheels),
            "iniconfig",
            "six",
        ],
        check=True,
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
    )
    repo = project(tmp_path, f"{repository_name}-air", ["iniconfig"])
    record = prepare(repo, tmp_path / "air.log", EnvironmentSpec(wheelhouse=wheels))
    assert record.status == "built" and record.source == "environment-file", record
    assert record.tests_collected == TESTS_IN_PROJECT
    log = (tmp_path / "air.log").read_text()
    assert "build network: none" in log and "no index, wheels from" in log
    table = tmp_path / "env.toml"
    table.write_text(f'[environment]\nwheelhouse = "{wheels}"\n')
    again = CliRunner().invoke(app, ["env", "build", str(repo), "--environment", str(table)])
    assert again.exit_code == 0 and f"environment reused: {record.image}" in again.output, again.output
    assert record.image in CliRunner().invoke(app, ["env", "list"]).output


HATCHLING = '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
HATCH_PACKAGES = '\n[tool.hatch.build.targets.wheel]\npackages = ["src/tiny"]\n'


def test_env_bundle_carries_what_the_build_installs_and_there_it_builds_with_no_network(
    tmp_path: Path, repository_name: str
) -> None:
    name = f"{repository_name}-carried"
    repo = project(
        tmp_path, name, ["iniconfig"], {"pyproject.toml": HATCHLING + pyproject(name, ["iniconfig"]) + HATCH_PACKAGES}
    )
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    Manifest(
        refactor_agent="0.1.0", python="3.11", machine="x86_64", made="now", made_on="here", project_wheel="w",
        llama_server_wheel="l", llama_server_origin="o", model_wheel="m",
    ).save(bundle)  # fmt: skip
    carried = CliRunner().invoke(app, ["env", "bundle", str(repo), str(bundle), "--log", str(tmp_path / "b.log")])
    assert carried.exit_code == 0, carried.output
    lines = carried.output.splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == [f"env bundle {n}/3" for n in (1, 2, 3)], lines
    table = bundle / "environments" / name / "environment.toml"
    assert lines[-1].startswith("env bundle: ") and f"--environment {table} " in lines[-1], lines[-1]
    assert table.read_text() == '[environment]\nwheelhouse = "wheels"\n'
    wheels = {path.name.split("-")[0] for path in (table.parent / "wheels").iterdir()}
    # What the build installed, and what hatchling builds the project's metadata with (its hook asks for editables).
    assert {"iniconfig", "six", "hatchling", "editables"} <= wheels, wheels
    manifest = Manifest.model_validate_json((bundle / "manifest.json").read_text())
    assert manifest.environments[name].environment_file == f"environments/{name}/environment.toml"
    for path in table.parent.rglob("*.whl"):
        assert manifest.files[path.relative_to(bundle).as_posix()] == sha256_of(path)

    built = next(line for line in carried.output.splitlines() if "refactor-agent-env:" in line).split()[-2]
    docker_client().images.remove(built)  # the far side has none: it builds it
    far = subprocess.run(
        ["unshare", "-n", sys.executable, "-m", "agent", "env", "build", str(repo), "--environment", str(table),
         "--log", str(tmp_path / "far.log")],
        cwd=SOURCE_ROOT, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert far.returncode == 0, far.stdout + far.stderr
    assert f"environment built: {built} in " in far.stdout and f"{TESTS_IN_PROJECT} tests collected" in far.stdout
    log = (tmp_path / "far.log").read_text()
    assert "build network: none" in log and "no index, wheels from" in log
    assert "\n==> refactor-agent: the metadata of the project itself" not in log, "its build requirements came along"


DIRECT_CONNECTION = (
    "python3 -c \"import socket\ntry: socket.create_connection(('pypi.org', 443), 5)\n"
    "except OSError: pass\nelse: raise SystemExit('a direct connection got through')\""
)
THROUGH_THE_PROXY = "python3 -c \"import urllib.request; urllib.request.urlopen('https://example.com', timeout=20)\""


def test_the_build_reaches_only_the_indexes_and_names_what_else_it_tried(tmp_path: Path, repository_name: str) -> None:
    repo = project(tmp_path, f"{repository_name}-egress", ["iniconfig"])
    spec = EnvironmentSpec(detect=False, setup=[DIRECT_CONNECTION, THROUGH_THE_PROXY])
    record = prepare(repo, tmp_path / "egress.log", spec)
    assert record.status == "failed" and record.failed_step == "setup command 2", record
    allowed = "allowed: files.pythonhosted.org:443, pypi.org:443"
    assert f"it tried to reach example.com:443, which the build may not ({allowed})" in (record.error or "")


def test_a_failing_build_names_its_step_and_leaves_the_tasks_unverified(tmp_path: Path, repository_name: str) -> None:
    empty_wheelhouse = tmp_path / "empty"
    empty_wheelhouse.mkdir()
    repo = project(tmp_path, f"{repository_name}-broken", ["iniconfig"])
    summary, events = run_once(tmp_path, repo, "broken", EnvironmentSpec(wheelhouse=empty_wheelhouse))
    environment = summary.environment
    assert environment is not None and environment.status == "failed"
    assert environment.failed_step == "python: install pyproject.toml, group tests"
    assert "environment build failed at step 'python: install pyproject.toml, group tests'" in str(environment.error)
    assert any("iniconfig" in line for line in environment.log_tail), environment.log_tail
    assert Path(environment.log or "").read_text().count("FAILED at step") == 1
    (task,) = summary.tasks
    assert task.verdict == "unverified"
    assert "the suite did not run at baseline: environment build failed at step" in task.reason
    assert any(event.type == "environment" and event.record.status == "failed" for event in events)
    report = (tmp_path / "runs" / "broken" / "report.md").read_text()
    assert "**environment**: FAILED, tasks unverified: environment build failed at step" in report
    table = tmp_path / "env.toml"
    table.write_text(f'[environment]\nwheelhouse = "{empty_wheelhouse}"\n')
    log = tmp_path / "cli.log"
    result = CliRunner().invoke(app, ["env", "build", str(repo), "--environment", str(table), "--log", str(log)])
    assert result.exit_code == 1 and f"(log: {log})" in result.output and "  | " in result.output


def test_doctor_names_the_source_and_whether_its_image_is_built(tmp_path: Path, repository_name: str) -> None:
    repo = project(tmp_path, f"{repository_name}-doctor", ["iniconfig"])
    result = check_environment(repo, DEFAULT_IMAGE, None)
    assert result.status == "ok" and result.message.startswith("detected: detected python (pyproject.toml")
    assert "not built yet" in result.message
    features = '{"image": "x", "features": {"ghcr.io/devcontainers/features/go:1": {}}}'
    (repo / ".devcontainer").mkdir()
    (repo / ".devcontainer" / "devcontainer.json").write_text(features)
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-qm", "features")
    refused = check_environment(repo, DEFAULT_IMAGE, None)
    assert refused.status == "ok" and refused.message.startswith("detected: detected python (pyproject.toml")
    assert "; skipped devcontainer: .devcontainer/devcontainer.json: Dev Container features" in refused.message
    (repo / ".devcontainer" / "devcontainer.json").write_text('{"image": "team/never-pulled:1"}')
    run_git(repo, "commit", "-qam", "an image that is not here")
    missing = check_environment(repo, DEFAULT_IMAGE, None)
    assert missing.status == "ok" and "base image team/never-pulled:1 is neither the sandbox image" in missing.message


def test_review_rebase_verifies_in_the_run_environment_and_rebuilds_it_when_the_new_base_needs_it(
    tmp_path: Path, repository_name: str
) -> None:
    repo = project(tmp_path, repository_name, ["iniconfig"])
    night, _ = run_once(tmp_path, repo, "night")
    (task,) = night.tasks
    assert task.verdict == "verified" and night.environment is not None, task.reason
    # summary.json says which test command, and why that one.
    assert (night.environment.test_command, night.environment.test_command_source) == (
        "python3 -m pytest -q",
        "pytest configured in pytest.ini",
    )
    # The user's work after the night: a test that needs the project's dependency, then a dependency more.
    (repo / "tests" / "test_more.py").write_text("import tiny\n\n\ndef test_more():\n    assert tiny.sections('[b]')\n")
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-qm", "a test more")

    def rebase() -> dict:
        command = ["review", "rebase", "night", "--onto", "main", "--apply", "--json"]
        result = CliRunner().invoke(app, [*command, "--runs-dir", str(tmp_path / "runs")])
        assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
        return json.loads(result.stdout)

    report = rebase()
    assert report["environment"]["image"] == night.environment.image, "the run's image: the dependencies are the same"
    (trial,) = report["branches"]
    assert (trial["verdict"], trial["moved"]) == ("verified", True), trial
    assert trial["tests"] == "5 passed (baseline 5 passed)"
    message = run_git(repo, "log", "-1", "--format=%B", str(task.branch))
    assert (
        "Refactor-Agent-Verdict: verified" in message
        and "Refactor-Agent-Tests: 5 passed (baseline 5 passed)" in message
    )
    (repo / "pyproject.toml").write_text(pyproject(repository_name, ["iniconfig", "six"]))
    run_git(repo, "commit", "-qam", "a dependency more")
    report = rebase()
    assert report["environment"]["status"] in ("built", "reused")
    assert report["environment"]["image"] != night.environment.image, "built from the new base's digest"
    (trial,) = report["branches"]
    assert (trial["verdict"], trial["moved"]) == ("verified", True), trial


# --- Python projects whose dependencies come from several files, whose metadata needs the source ---

SETUP_PY_PROJECT = {
    # The runtime requirement is only in install_requires, the test one only in requirements-dev.txt, and the
    # version only in a file setup.py reads: each of them alone was what broke a real checkout.
    "setup.py": (
        "import os\nfrom setuptools import setup\n\n"
        "here = os.path.dirname(os.path.abspath(__file__))\n"
        "with open(os.path.join(here, 'src', 'spkg', 'VERSION')) as handle:\n"
        "    version = handle.read().strip()\n"
        "setup(name='spkg', version=version, package_dir={'': 'src'}, packages=['spkg'],\n"
        "      install_requires=['idna'], entry_points={'console_scripts': ['spkg-hello = spkg:hello']})\n"
    ),
    "src/spkg/VERSION": "1.4.2\n",
    "src/spkg/__init__.py": "import idna\n\n\ndef hello():\n    print('hello')\n",
    "requirements-dev.txt": "-e .\nsix\n",
    "tests/test_spkg.py": (
        "import importlib.metadata\nimport shutil\nimport subprocess\n\nimport six\nimport spkg\n\n\n"
        "def test_the_version_from_its_file():\n    assert importlib.metadata.version('spkg') == '1.4.2'\n\n\n"
        "def test_the_entry_point_runs_the_worktree():\n"
        "    hello = subprocess.run([shutil.which('spkg-hello')], capture_output=True, text=True)\n"
        "    assert hello.stdout == 'hello\\n'\n\n\n"
        "def test_the_worktree_is_what_imports():\n    assert spkg.__file__ == '/workspace/src/spkg/__init__.py'\n\n\n"
        "def test_six_from_requirements_dev():\n    assert six.PY3\n"
    ),
    "pytest.ini": "[pytest]\naddopts = -p no:cacheprovider\n",
}
# A build backend inside the repository that imports the package (ansible's shape), which imports its runtime
# dependency (so the metadata cannot be built in isolation), dynamic dependencies from a file, PEP 621 next to
# requirements-tests.txt, and an include in requirements/ that reaches another folder. idna and six are not in
# the sandbox image (its pytest brings iniconfig): only an install makes them importable.
IN_TREE_BACKEND_PROJECT = {
    "pyproject.toml": (
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "in_tree_backend"\n'
        'backend-path = ["build_tools"]\n\n'
        '[project]\nname = "bpkg"\ndynamic = ["version", "dependencies"]\nrequires-python = ">=3.9"\n\n'
        '[tool.setuptools.dynamic]\nversion = {attr = "bpkg._version.VERSION"}\n'
        'dependencies = {file = ["requirements/runtime.in"]}\n'
    ),
    "build_tools/in_tree_backend.py": (
        "import os\nimport sys\n\n"
        "sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'src'))\n"
        "import bpkg._version  # noqa: E402,F401  (the build imports the package)\n"
        "from setuptools.build_meta import *  # noqa: E402,F403\n"
    ),
    "src/bpkg/__init__.py": "import idna  # noqa: F401\n",
    "src/bpkg/_version.py": "VERSION = '2.0.1'\n",
    "requirements/runtime.in": "idna\n",
    "requirements-tests.txt": "-r requirements/tests.txt\n",
    "requirements/tests.txt": "-r ../extras/more.txt\n",
    "extras/more.txt": "six\n",
    "tests/test_bpkg.py": (
        "import importlib.metadata\n\nimport bpkg\nimport six\n\n\n"
        "def test_metadata_built_by_the_in_tree_backend():\n"
        "    assert importlib.metadata.version('bpkg') == '2.0.1'\n\n\n"
        "def test_the_worktree_is_what_imports():\n    assert bpkg.__file__ == '/workspace/src/bpkg/__init__.py'\n\n\n"
        "def test_six_from_the_nested_include():\n    assert six.PY3\n"
    ),
    "pytest.ini": "[pytest]\naddopts = -p no:cacheprovider\n",
}


def built_and_passing(
    tmp_path: Path, name: str, files: dict[str, str], passed: int, tag: str | None = None
) -> tuple[Path, EnvironmentRecord]:
    """A fixture repository, its environment built with nothing configured, and its whole suite passing in a
    sandbox of that image (no network) on the repository's own files."""
    repo = make_repo(tmp_path / name, files)
    if tag is not None:
        run_git(repo, "tag", tag)
    record = prepare(repo, tmp_path / f"{name}.log")
    assert record.status == "built", (record.error, record.log_tail)
    with DockerSandbox(record.image, repo, run_id="env-python", client=docker_client()) as sandbox:
        output = sandbox.execute("python -m pytest -q 2>&1 | tail -n 3", timeout_s=300).output
    assert f"{passed} passed" in output and "failed" not in output and "error" not in output, output
    return repo, record


def test_a_setup_py_project_gets_its_install_requires_its_requirements_dev_and_its_metadata(
    tmp_path: Path, repository_name: str
) -> None:
    _, record = built_and_passing(tmp_path, f"{repository_name}-setup-py", SETUP_PY_PROJECT, passed=4)
    assert record.description == "detected python (setup.py, requirements-dev.txt)"
    client = docker_client()
    leftover = client.containers.run(record.image, ["ls", "-A", "/workspace"], network_mode="none", remove=True)
    assert leftover == b"", "the build's copy of the tree is not kept in the image"
    site = client.containers.run(
        record.image, ["sh", "-c", "ls /opt/refactor-agent/venv/lib/python3*/site-packages"], remove=True
    ).decode()
    assert "spkg-1.4.2.dist-info" in site and "\nspkg\n" not in f"\n{site}", "metadata only, never a copy"


def test_a_build_that_imports_the_package_sees_the_committed_tree_and_source_edits_reuse_its_image(
    tmp_path: Path, repository_name: str
) -> None:
    repo, record = built_and_passing(tmp_path, f"{repository_name}-in-tree", IN_TREE_BACKEND_PROJECT, passed=3)
    (repo / "src" / "bpkg" / "extra.py").write_text("VALUE = 1\n")
    (repo / "build_tools" / "in_tree_backend.py").write_text(
        IN_TREE_BACKEND_PROJECT["build_tools/in_tree_backend.py"] + "\n"
    )
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-qm", "source only")
    again = prepare(repo, tmp_path / "again.log")
    assert (again.status, again.image) == ("reused", record.image)


# humanize's shape: hatch-vcs writes the version module into the package at build time; the worktree never has it.
GENERATED_VERSION_PROJECT = {
    "pyproject.toml": (
        '[build-system]\nrequires = ["hatchling", "hatch-vcs"]\nbuild-backend = "hatchling.build"\n\n'
        '[project]\nname = "vpkg"\ndynamic = ["version"]\n\n[tool.hatch.version]\nsource = "vcs"\n\n'
        '[tool.hatch.build.hooks.vcs]\nversion-file = "src/vpkg/_version.py"\n'
    ),
    "src/vpkg/__init__.py": "from vpkg._version import __version__\n",
    "tests/test_vpkg.py": (
        "import importlib.metadata\n\nimport vpkg\n\n\n"
        "def test_the_generated_version_module():\n    assert vpkg.__version__ == '0.4.0'\n\n\n"
        "def test_the_metadata_agrees():\n    assert importlib.metadata.version('vpkg') == '0.4.0'\n\n\n"
        "def test_the_worktree_is_what_imports():\n    assert vpkg.__file__ == '/workspace/src/vpkg/__init__.py'\n"
    ),
    "pytest.ini": "[pytest]\naddopts = -p no:cacheprovider\n",
}


def test_a_module_the_build_generates_is_served_to_the_tests(tmp_path: Path, repository_name: str) -> None:
    name = f"{repository_name}-vcs"
    repo, _ = built_and_passing(tmp_path, name, GENERATED_VERSION_PROJECT, passed=3, tag="v0.4.0")
    assert "generated by the build, kept for the tests: vpkg/_version.py" in (tmp_path / f"{name}.log").read_text()
    assert not (repo / "src" / "vpkg" / "_version.py").exists(), "nothing is written into the worktree"


NEWER_PYTHON_PROJECT = {
    "pyproject.toml": (
        '[project]\nname = "newer"\nversion = "1"\nrequires-python = ">=3.12"\ndependencies = ["six"]\n'
    ),
    "newer.py": "import six\n\nNAME = 'newer'\n",
    "tests/test_newer.py": (
        "import sys\n\nimport newer\nimport six\n\n\n"
        "def test_the_python_it_requires():\n    assert sys.version_info >= (3, 12)\n\n\n"
        "def test_six_installed_for_that_python():\n    assert six.PY3 and newer.NAME\n"
    ),
    "pytest.ini": "[pytest]\naddopts = -p no:cacheprovider\n",
}


@pytest.mark.bootstrap
def test_a_project_that_requires_a_newer_python_gets_the_newer_debian_releases_base(
    tmp_path: Path, repository_name: str
) -> None:
    """The trixie image is made by debootstrap the first time a repository needs it, then kept and reused."""
    _, record = built_and_passing(tmp_path, f"{repository_name}-newer", NEWER_PYTHON_PROJECT, passed=2)
    assert record.description.endswith("; Python 3.13.5 for requires-python >=3.12"), record.description
    docker_client().images.get(image_for_suite("trixie"))


SPEED_C = """#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *twice(PyObject *self, PyObject *args) {
    long value;
    if (!PyArg_ParseTuple(args, "l", &value)) return NULL;
    return PyLong_FromLong(2 * value);
}

static PyMethodDef methods[] = {{"twice", twice, METH_VARARGS, "2x"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speed", NULL, -1, methods};
PyMODINIT_FUNC PyInit__speed(void) { return PyModule_Create(&module); }
"""
C_EXTENSION_PROJECT = {
    "setup.py": (
        "from setuptools import Extension, setup\n\n"
        "setup(name='cpkg', version='0.1', package_dir={'': 'src'}, packages=['cpkg'],\n"
        "      ext_modules=[Extension('cpkg._speed', ['src/cpkg/_speed.c'])])\n"
    ),
    "src/cpkg/__init__.py": "from cpkg._speed import twice\n",
    "src/cpkg/_speed.c": SPEED_C,
    # mysqlclient has no wheel for Linux and needs MySQL's client library, which is not there: it is left out, not
    # the rest.
    "requirements-tests.txt": "six\nmysqlclient==2.2.7\n",
    "tests/test_cpkg.py": (
        "import cpkg\nimport six\n\n\n"
        "def test_the_compiled_extension():\n    assert cpkg.twice(21) == 42 and six.PY3\n\n\n"
        "def test_the_worktree_is_what_imports():\n    assert cpkg.__file__ == '/workspace/src/cpkg/__init__.py'\n"
    ),
    "pytest.ini": "[pytest]\naddopts = -p no:cacheprovider\n",
}


def test_a_c_extension_is_compiled_with_build_tools_the_image_does_not_keep(
    tmp_path: Path, repository_name: str
) -> None:
    name = f"{repository_name}-c"
    _, record = built_and_passing(tmp_path, name, C_EXTENSION_PROJECT, passed=2)
    assert "==> refactor-agent: left out mysqlclient: it does not build here" in (tmp_path / f"{name}.log").read_text()
    client = docker_client()
    probe = "command -v gcc cc || echo no compiler; ls /usr/include/python3*/Python.h 2>/dev/null || echo no headers"
    leftover = client.containers.run(record.image, ["sh", "-c", probe], network_mode="none", remove=True).decode()
    assert leftover.split() == ["no", "compiler", "no", "headers"], leftover
