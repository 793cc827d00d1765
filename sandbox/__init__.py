"""Docker sandbox: one container per task, no network, commands with timeouts and bounded output.

Exports load on first use (PEP 562): importing `docker` costs most of a second, and commands that never start a
container (`pack`, `server`) should not pay it.

- container.py: one container per task: commands with the workspace mounted, no network;
- daemon.py: connecting to the Docker daemon, the sandbox image there;
- models.py: a sandbox's configuration and one command's outcome (the one module the protocol may read);
- output.py: bounded capture of a command's output;
- disk.py: the host disk under the workspace, watched;
- pids.py: whether a container's process table is full;
- owner.py: which process owns a container, so leftovers can be told apart;
- errors.py: the errors a user can cause, one line each;
- image.py: building the sandbox image (Dockerfile or debootstrap);
- suites.py: the Debian releases an image is made from;
- mirrors.py: a Debian mirror for debootstrap;
- cli.py: `refactor-agent sandbox build|sweep`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandbox.container import LABEL, DockerSandbox, remove_run_containers, sweep_leftovers
    from sandbox.daemon import docker_client, require_image
    from sandbox.errors import DockerUnavailable, ImageMissing, SandboxError, SandboxLost
    from sandbox.image import build_image
    from sandbox.models import DEFAULT_IMAGE, ExecResult, SandboxLimits, restarted_notice

_EXPORTS = {
    "DEFAULT_IMAGE": "sandbox.models",
    "LABEL": "sandbox.container",
    "DockerSandbox": "sandbox.container",
    "DockerUnavailable": "sandbox.errors",
    "ExecResult": "sandbox.models",
    "ImageMissing": "sandbox.errors",
    "SandboxError": "sandbox.errors",
    "SandboxLimits": "sandbox.models",
    "SandboxLost": "sandbox.errors",
    "build_image": "sandbox.image",
    "docker_client": "sandbox.daemon",
    "remove_run_containers": "sandbox.container",
    "require_image": "sandbox.daemon",
    "restarted_notice": "sandbox.models",
    "sweep_leftovers": "sandbox.container",
}
__all__ = [
    "DEFAULT_IMAGE",
    "LABEL",
    "DockerSandbox",
    "DockerUnavailable",
    "ExecResult",
    "ImageMissing",
    "SandboxError",
    "SandboxLimits",
    "SandboxLost",
    "build_image",
    "docker_client",
    "remove_run_containers",
    "require_image",
    "restarted_notice",
    "sweep_leftovers",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'sandbox' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
