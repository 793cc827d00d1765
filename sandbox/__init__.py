"""Docker sandbox: one container per task, no network, commands with timeouts and bounded output."""

from sandbox.container import LABEL, DockerSandbox, sweep_leftovers
from sandbox.daemon import docker_client, require_image
from sandbox.errors import DockerUnavailable, ImageMissing, SandboxError
from sandbox.image import DEFAULT_IMAGE, build_image
from sandbox.models import ExecResult, SandboxLimits

__all__ = [
    "DEFAULT_IMAGE",
    "LABEL",
    "DockerSandbox",
    "DockerUnavailable",
    "ExecResult",
    "ImageMissing",
    "SandboxError",
    "SandboxLimits",
    "build_image",
    "docker_client",
    "require_image",
    "sweep_leftovers",
]
