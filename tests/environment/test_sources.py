"""Where an environment comes from and what its digest covers, decided on the host from committed files only."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import git
import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.environment.bases import BaseImages
from agent.environment.committed import CommittedFileError, committed_tree
from agent.environment.devcontainer import DevcontainerError, parse_devcontainer, strip_jsonc
from agent.environment.indexes import IndexConfig, host_index_config
from agent.environment.plan import EnvironmentPlan
from agent.environment.sources import resolve_plan
from agent.environment.spec import EnvironmentFileError, load_environment_file
from agent.protocol.environment import EnvironmentSpec
from agent.worktree.safe_git import GitError

from support.repos import git as run_git
from support.repos import make_repo

SANDBOX = "refactor-agent-sandbox:latest"
NO_INDEX_CONFIG = IndexConfig()


def plan_of(
    repo: Path,
    *,
    spec: EnvironmentSpec | None = None,
    explicit: bool = False,
    allowed: tuple[str, ...] = (),
    present: tuple[str, ...] = (SANDBOX,),
) -> EnvironmentPlan:
    """The plan for `repo`, with `present` the images on this (pretend) machine: the real daemon is not asked."""
    bases = BaseImages.of(SANDBOX, allowed, lambda image: image in present)
    with committed_tree(git.Repo(repo)) as tree:
        return resolve_plan(
            tree, sandbox_image=SANDBOX, image_explicit=explicit, spec=spec, bases=bases, host_index=NO_INDEX_CONFIG
        )


def commands(plan: EnvironmentPlan) -> str:
    return "\n".join(step.command for step in plan.steps)


def test_the_committed_tree_is_the_revisions_commit_read_with_its_files_over_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "one\n"})
    first = run_git(repo, "rev-parse", "HEAD").strip()
    run_git(repo, "tag", "-a", "-m", "v1", "v1")
    run_git(repo, "commit", "-q", "--allow-empty", "-m", "second")
    started: list[list[str]] = []
    popen = subprocess.Popen
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a[0]) or popen(*a, **k))
    with committed_tree(git.Repo(repo), "v1") as tree:  # an annotated tag: its commit
        assert (tree.commit, tree.text("a.txt")) == (first, "one\n")
    assert [command[command.index("-c") + 4] for command in started] == ["cat-file", "ls-tree"]
    with pytest.raises(GitError, match="git rev-parse failed: fatal: Needed a single revision"):
        with committed_tree(git.Repo(repo), "no-such-ref"):
            pass


PYPROJECT = """[project]
name = "demo"
version = "1"
dependencies = ["iniconfig"]
[project.optional-dependencies]
test = ["pytest-mock"]
docs = ["sphinx"]
[dependency-groups]
tests = ["six", {include-group = "lint"}]
lint = ["ruff"]
"""


def test_pep_621_extras_and_pep_735_groups_for_tests_are_installed_and_the_src_layout_is_on_the_path(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "demo", {"pyproject.toml": PYPROJECT, "src/demo/__init__.py": ""})
    plan = plan_of(repo)
    assert plan.source == "detected"
    assert "pip install -r pyproject.toml --extra test --group pyproject.toml:tests" in commands(plan)
    assert "docs" not in commands(plan) and "lint" not in commands(plan)
    assert plan.env["PYTHONPATH"] == "/workspace/src" and plan.env["VIRTUAL_ENV"] == "/opt/refactor-agent/venv"
    assert set(plan.tree_files) == {"pyproject.toml"}, "what decides the dependencies, never the source"


def test_requirements_files_lose_the_line_that_installs_the_project_itself(tmp_path: Path) -> None:
    requirements = "-e .[socks]\npytest>=7\n.\nsix  # pinned below\n"
    repo = make_repo(tmp_path / "flat", {"requirements-dev.txt": requirements, "flat.py": "X = 1\n"})
    plan = plan_of(repo)
    assert "pip install -r requirements-dev.txt" in commands(plan)
    assert plan.tree_files["requirements-dev.txt"] == b"pytest>=7\nsix  # pinned below\n"
    assert plan.env["PYTHONPATH"] == "/workspace"


def test_lock_files_are_honoured(tmp_path: Path) -> None:
    uv_locked = make_repo(tmp_path / "a", {"pyproject.toml": PYPROJECT, "uv.lock": "version = 1\n"})
    assert "export --frozen --no-hashes --no-emit-project --all-groups --extra test" in commands(plan_of(uv_locked))
    poetry = make_repo(tmp_path / "b", {"pyproject.toml": "[tool.poetry]\nname = 'b'\n", "poetry.lock": "# lock\n"})
    assert "poetry export --without-hashes" in commands(plan_of(poetry))


def test_source_edits_keep_the_digest_and_dependency_edits_change_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "demo", {"pyproject.toml": PYPROJECT, "src/demo/__init__.py": ""})
    first = plan_of(repo).digest("sha256:base", "0.9")
    (repo / "src" / "demo" / "__init__.py").write_text("VALUE = 2\n")
    run_git(repo, "commit", "-qam", "source")
    assert plan_of(repo).digest("sha256:base", "0.9") == first
    assert plan_of(repo).digest("sha256:other-base", "0.9") != first
    (repo / "pyproject.toml").write_text(PYPROJECT.replace('"six"', '"six>=1.16"'))
    run_git(repo, "commit", "-qam", "dependency")
    assert plan_of(repo).digest("sha256:base", "0.9") != first


def test_uncommitted_and_symlinked_dependency_files_are_not_read(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "demo", {"README.md": "demo\n"})
    (repo / "requirements.txt").symlink_to("/etc/passwd")
    run_git(repo, "add", "requirements.txt")
    run_git(repo, "commit", "-qm", "a symlink")
    (repo / "pyproject.toml").write_text(PYPROJECT)  # not committed: the run works from HEAD
    plan = plan_of(repo)
    assert plan.source == "none" and plan.files == {}


def test_the_snapshot_keeps_links_out_of_the_repository_as_links_and_writes_nothing_outside(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "demo", {"pkg/code.py": "x = 1\n"})
    outside = tmp_path / "outside"
    outside.write_text("keep me\n")
    links = {"config": "/etc/passwd", "pkg/up": "../../outside", "root": "/", "pkg/near": "code.py"}
    for name, target in links.items():
        (repo / name).symlink_to(target)
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-qm", "links")
    target = tmp_path / "snapshot"
    with committed_tree(git.Repo(repo)) as tree:
        tree.snapshot(target)
    assert {name: os.readlink(target / name) for name in links} == links
    assert (target / "pkg/code.py").read_text() == "x = 1\n" and outside.read_text() == "keep me\n"


def test_only_a_directory_of_the_tree_has_a_tree_id_never_a_path_through_a_link(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "demo", {"pkg/code.py": "x = 1\n"})
    (repo / "linked").symlink_to("/")
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-qm", "a link to /")
    with committed_tree(git.Repo(repo)) as tree:
        assert len(tree.tree_id("pkg")) == 40 and tree.tree_id("") != tree.tree_id("pkg")
        for through_link in ("linked", "linked/etc"):
            with pytest.raises(CommittedFileError, match=f"{through_link} is not a directory of the repository"):
                tree.tree_id(through_link)


def test_the_users_image_and_table_win_over_the_repositorys_devcontainer_then_detection(tmp_path: Path) -> None:
    """Issue 19: a devcontainer silently won over an explicit --environment."""
    files = {
        "pyproject.toml": PYPROJECT,
        ".devcontainer/devcontainer.json": '{"image": "team/dev:1", "postCreateCommand": "make deps"}',
    }
    repo = make_repo(tmp_path / "demo", files)
    image = plan_of(repo, explicit=True, allowed=("team/dev:1",), present=("team/dev:1", SANDBOX))
    assert image.source == "image"
    assert image.skipped == [
        "devcontainer: .devcontainer/devcontainer.json: not used, an explicit image wins over the repository's"
    ]
    table = plan_of(repo, spec=EnvironmentSpec(setup=["true"]), allowed=("team/dev:1",), present=("team/dev:1",))
    assert table.source == "environment-file" and table.used == ["[environment] table", table.used[1]]
    assert table.used[1].startswith("detection: python (pyproject.toml")
    assert table.skipped == [
        "devcontainer: .devcontainer/devcontainer.json: not used, the [environment] table given wins over the "
        "repository's"
    ]
    plan = plan_of(repo, allowed=("team/dev:1",), present=("team/dev:1",))
    assert (plan.source, plan.base_image, plan.skipped) == ("devcontainer", "team/dev:1", [])
    assert [step.command for step in plan.steps] == ["make deps"] and plan.steps[0].workdir == "/workspace"
    run_git(repo, "rm", "-q", ".devcontainer/devcontainer.json")
    run_git(repo, "commit", "-qm", "no devcontainer")
    table = plan_of(repo, spec=EnvironmentSpec(base_image="ci:py", packages=["rich"], setup=["echo ready"]))
    assert (table.source, table.base_image, table.skipped) == ("environment-file", "ci:py", [])
    assert commands(table).endswith("pip install rich\necho ready")
    assert plan_of(repo).source == "detected"


@pytest.mark.parametrize(
    ("image", "allowed", "present", "reason"),
    [
        (
            "mcr.microsoft.com/devcontainers/python:3.11",
            (),
            (),
            "base image mcr.microsoft.com/devcontainers/python:3.11 is neither the sandbox image "
            f"({SANDBOX}) nor in your allowed_base_images",
        ),
        (
            "mcr.microsoft.com/devcontainers/python:3.11",
            ("mcr.microsoft.com/devcontainers/python:3.11",),
            (),
            "base image mcr.microsoft.com/devcontainers/python:3.11 is not on this machine (no registry is used)",
        ),
        (
            "refactor-agent-env:other-0123456789ab",
            (),
            ("refactor-agent-env:other-0123456789ab",),
            "base image refactor-agent-env:other-0123456789ab is neither the sandbox image "
            f"({SANDBOX}) nor in your allowed_base_images",
        ),
    ],
    ids=["registry-image", "allowed-but-absent", "another-repositorys-environment"],
)
def test_a_devcontainer_on_a_base_not_allowed_or_not_here_falls_back_to_detection(
    tmp_path: Path, image: str, allowed: tuple[str, ...], present: tuple[str, ...], reason: str
) -> None:
    """Issue 18/19: any local image was accepted as a base, and a registry image failed the build with no
    fallback."""
    files = {"pyproject.toml": PYPROJECT, ".devcontainer/devcontainer.json": f'{{"image": "{image}"}}'}
    plan = plan_of(make_repo(tmp_path / "demo", files), allowed=allowed, present=present)
    assert plan.source == "detected"
    assert plan.skipped == [f"devcontainer: .devcontainer/devcontainer.json: {reason}"]
    assert plan.used == [f"detection: {plan.description.removeprefix('detected ')}"]


def test_the_sandbox_image_and_allowed_ones_are_matched_however_they_are_spelled(tmp_path: Path) -> None:
    dockerfile = (
        "ARG VARIANT=3.11\nFROM docker.io/library/python:${VARIANT} AS tools\n"
        f"FROM {SANDBOX}\nCOPY --from=tools /usr/bin/x /x\n"
    )
    files = {
        ".devcontainer/devcontainer.json": '{"build": {"dockerfile": "Dockerfile", "args": {"VARIANT": "3.12"}}}',
        ".devcontainer/Dockerfile": dockerfile,
    }
    repo = make_repo(tmp_path / "demo", files)
    plan = plan_of(repo, allowed=("python:3.12",), present=(SANDBOX, "docker.io/library/python:3.12"))
    assert plan.source == "devcontainer" and plan.dockerfile is not None
    assert plan.dockerfile.base_images == ["docker.io/library/python:3.12", SANDBOX]
    refused = plan_of(repo, allowed=("python:3.11",), present=(SANDBOX, "docker.io/library/python:3.12"))
    assert refused.source == "none" and "python:3.12 is neither the sandbox image" in refused.skipped[0]


def test_devcontainer_json_takes_comments_and_trailing_commas_and_refuses_features() -> None:
    text = '{\n // a comment\n "image": "x//y", /* block */\n "containerEnv": {"A": "1",},\n}\n'
    assert strip_jsonc(text).count("//") == 1, "a // inside a string is kept"
    config = parse_devcontainer(text, "devcontainer.json")
    assert config.image == "x//y" and config.containerEnv == {"A": "1"}
    with pytest.raises(
        DevcontainerError, match=r"features \(ghcr.io/devcontainers/features/node:1\) are not supported"
    ):
        parse_devcontainer('{"image": "x", "features": {"ghcr.io/devcontainers/features/node:1": {}}}', "d.json")


def test_a_devcontainer_dockerfile_outside_the_repository_is_refused(tmp_path: Path) -> None:
    bad = '{"build": {"dockerfile": "../../Dockerfile", "context": ".."}}'
    repo = make_repo(tmp_path / "demo", {".devcontainer/devcontainer.json": bad})
    (skipped,) = plan_of(repo).skipped
    assert "leads outside the repository" in skipped


def test_the_hosts_pip_configuration_carries_over_and_local_indexes_are_mounted(tmp_path: Path) -> None:
    local = tmp_path / "mirror" / "simple"
    local.mkdir(parents=True)
    config = tmp_path / "pip.conf"
    config.write_text(
        f"[global]\nindex-url = https://user:secret@mirror.example/simple\nextra-index-url = file://{local}\n"
    )
    ca = tmp_path / "ca.pem"
    ca.write_text("cert")
    index = host_index_config(
        {"PIP_CONFIG_FILE": str(config), "HTTPS_PROXY": "http://proxy:3128", "SSL_CERT_FILE": str(ca), "HOME": "/x"}
    )
    assert index.index_url == "https://user:secret@mirror.example/simple" and not index.offline
    assert index.mounts == {str(local.parent): str(local.parent)}, "a simple/ index links to ../files"
    assert "secret" not in index.describe() and "***@mirror.example" in index.describe()
    environment = index.build_environment("http://127.0.0.1:3128")
    assert environment["HTTPS_PROXY"] == "http://127.0.0.1:3128" and environment["SSL_CERT_FILE"].startswith("/run/")
    assert index.upstream_proxy() == ("http://proxy:3128", ""), "the host's proxy is where the build's egress goes"
    assert index.allowed_endpoints() == {("mirror.example", 443)}
    assert 'index-url = "https://user:secret@mirror.example/simple"' in index.uv_config()
    offline = host_index_config({"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": f"file://{local}", "HOME": "/x"})
    assert offline.offline, "indexes that are all local directories need no network"


def test_environment_files_are_checked_with_one_line_errors(tmp_path: Path) -> None:
    good = tmp_path / "env.toml"
    (tmp_path / "wheels").mkdir()
    good.write_text('[environment]\nwheelhouse = "wheels"\npackages = ["six"]\n')
    assert load_environment_file(good).wheelhouse == tmp_path / "wheels"
    for text, message in (
        ("[other]\n", "no \\[environment\\] table"),
        ("[environment]\nsetup = 'not a list'\n", "setup: Input should be a valid list"),
        ("[environment]\nbase_imag = 'x'\n", "base_imag: Extra inputs are not permitted"),
        ("[environment\n", "not valid TOML"),
    ):
        good.write_text(text)
        with pytest.raises(EnvironmentFileError, match=message):
            load_environment_file(good)


def test_run_refuses_a_bad_environment_file_and_an_image_with_a_table_in_one_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "demo", {"a.py": "A = 1\n"})
    bad = tmp_path / "env.toml"
    bad.write_text("[environment]\nsetup = 3\n")
    result = CliRunner().invoke(app, ["run", str(repo), "--task", "x", "--environment", str(bad)])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "setup" in result.output
    bad.write_text("[environment]\n")
    both = ["run", str(repo), "--task", "x", "--environment", str(bad), "--image", "mine:1"]
    result = CliRunner().invoke(app, both)
    assert result.exit_code == 2 and "choose one" in result.output


def test_node_go_and_rust_are_detected_with_their_registries(tmp_path: Path) -> None:
    files = {
        "package.json": '{"name": "x"}',
        "package-lock.json": "{}",
        "go.mod": "module x\n",
        "go.sum": "",
        "Cargo.toml": "[package]\nname = 'x'\n",
    }
    plan = plan_of(make_repo(tmp_path / "poly", files))
    assert [step.name for step in plan.steps] == ["node: npm ci", "go: go mod download", "rust: cargo fetch"]
    assert "command -v npm" in plan.steps[0].command, "a base image without the tool fails with a message"
    assert {"registry.npmjs.org", "proxy.golang.org", "index.crates.io"} <= set(plan.hosts)
    assert plan.env["GOPROXY"] == "off" and plan.env["CARGO_NET_OFFLINE"] == "true"


def test_env_build_refuses_what_is_not_a_repository_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["env", "build", str(tmp_path / "missing")])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "no such directory" in result.output
