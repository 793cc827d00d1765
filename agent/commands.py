"""The command line's conventions, once: its exit codes, the exception bad input raises, and the one line (never a
traceback) each expected problem ends a command with."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import typer

EXIT_FAILED = 1  # a step that ran failed (git, Docker, a server): nothing half-done is left behind
EXIT_USAGE = 2  # bad input or a failed preflight: nothing was done


class UsageProblem(Exception):
    """Bad input on the command line; str() is the one line the user sees."""


def failure(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    """`error: message` on stderr; the Exit to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@contextmanager
def one_line_errors(
    *problems: type[Exception], code: int = EXIT_USAGE, shown: Callable[[str], str] = str
) -> Iterator[None]:
    """Each of `problems` ends the command as one line (through `shown`: `printable` where the text is the
    repository's) and exit `code`."""
    try:
        yield
    except problems as problem:
        raise failure(shown(str(problem)), code) from None
