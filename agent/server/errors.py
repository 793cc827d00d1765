"""llama-server failures a user can cause or meet; each renders as one line. No imports: the CLI loads this."""


class ServerError(Exception):
    """A one-line, user-facing problem with the llama-server."""


class ServerUnreachable(ServerError):
    pass


class ServerLoading(ServerError):
    pass


class SlotsUnsupported(ServerError):
    """The server was started without --slot-save-path: it cannot save or restore a slot."""


class LaunchError(ServerError):
    """llama-server could not be found, started or stopped."""


class BinaryNotFound(LaunchError):
    pass


class ModelNotFound(LaunchError):
    pass
