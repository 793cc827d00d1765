"""Connecting to the Docker daemon and checking that the sandbox image is there."""

import os

import docker
import docker.errors
from docker.utils import kwargs_from_env

from sandbox.errors import DockerUnavailable, ImageMissing, one_line

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"


def docker_client(*, timeout_s: float = 120) -> docker.DockerClient:
    """A client for the daemon named by the environment, proven alive by a ping."""
    address = os.environ.get("DOCKER_HOST", DEFAULT_DOCKER_HOST)
    try:
        client = docker.from_env(timeout=int(timeout_s))
        client.ping()
    except docker.errors.DockerException as error:
        raise DockerUnavailable(f"Docker daemon unreachable at {address}: {one_line(error)}") from error
    return client


def build_api_client(timeout_s: float) -> docker.APIClient:
    """A low-level client of its own for one long request (a build): it can be cut without touching others'."""
    return docker.APIClient(timeout=int(timeout_s), **kwargs_from_env())


def require_image(client: docker.DockerClient, image: str) -> None:
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound as error:
        raise ImageMissing(image) from error
