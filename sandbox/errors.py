"""Errors a user can cause around the sandbox; each renders as one line."""


def one_line(error: object) -> str:
    """Docker's messages can span lines and nest reasons; a user-facing message may not."""
    return " ".join(str(error).split())


class SandboxError(Exception):
    """Base of every sandbox failure; ``str(error)`` is a one-line message meant for the user."""


class SandboxLost(SandboxError):
    """The task's container vanished and no fresh one could be started: the task cannot go on."""


class DockerUnavailable(SandboxError):
    """The Docker daemon cannot be reached."""


class ImageMissing(SandboxError):
    """The sandbox image has not been built on this machine."""

    def __init__(self, image: str) -> None:
        super().__init__(f"sandbox image {image!r} not found: build it with `refactor-agent sandbox build --bootstrap`")
        self.image = image
