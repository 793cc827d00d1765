"""Launcher failures a user can cause; each renders as one line."""

from agent.llama_api import ServerError


class LaunchError(ServerError):
    """llama-server could not be found, started or stopped."""


class BinaryNotFound(LaunchError):
    pass


class ModelNotFound(LaunchError):
    pass
