"""The command line's conventions, once: its exit codes, the exception bad input raises, the one line (never a
traceback, never a box) each expected problem ends a command with, and help as the ecosystem writes it (`-h`,
`REPO`/`TEXT`/`N` metavars, brackets kept as text, readable at 80 columns).

Every Typer of the product is a `CommandGroup`: its groups are `Commands`, its commands `Command`.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import PurePath
from typing import Any, NoReturn

import typer

# typer 0.29 vendors click: its exceptions are reachable only here (typer re-exports BadParameter alone).
from typer._click.exceptions import (
    BadParameter,
    ClickException,
    MissingParameter,
    NoArgsIsHelpError,
    NoSuchOption,
    UsageError,
)
from typer.core import TyperArgument, TyperCommand, TyperGroup

from agent.safety.printable import printable

EXIT_FAILED = 1  # a step that ran failed (git, Docker, a server): nothing half-done is left behind
EXIT_USAGE = 2  # bad input or a failed preflight: nothing was done
HELP_WIDTH = 100  # help wraps at the terminal's width, never wider than this
# `--bogus` → `did you mean --base?` only when this close (difflib's ratio): click offers any loose match.
_SUGGESTION_CUTOFF = 0.8
# A command's line in a group's list is its docstring's whole first sentence, however long (help wraps it).
_WHOLE_SENTENCE = 100_000
# Parameters whose number is a time: the metavar says its unit.
_SECONDS_SUFFIXES = ("timeout", "_s", "wait")


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


def _sentence(message: str) -> str:
    """typer's message as the middle of a line: no `Value error, ` prefix, no final stop, a lower-case start, and a
    choice list without its quotes (`is not one of low, high, max`)."""
    message = message.removeprefix("Value error, ").rstrip(".")
    head, separator, choices = message.partition(" is not one of ")
    if separator:
        message = head + separator + choices.replace("'", "")
    return message[:1].lower() + message[1:]


def _parameter_name(parameter: Any) -> str:
    """An option by its longest flag (`--effort`), an argument by its metavar (`REPO`)."""
    if isinstance(parameter, TyperArgument):
        return str(parameter.metavar or parameter.name).upper()
    return max(parameter.opts, key=len)


def usage_line(error: UsageError) -> str:
    """The one line a usage error is: what is wrong, and for a word not understood, where help is."""
    see = f"; see {error.ctx.command_path} -h" if error.ctx is not None else ""
    if isinstance(error, MissingParameter) and error.param is not None:
        text = f"missing {_parameter_name(error.param)}{see}"
    elif isinstance(error, BadParameter) and error.param is not None:
        text = f"{_parameter_name(error.param)}: {_sentence(error.message)}"
    elif isinstance(error, NoSuchOption):
        text = f"no such option {error.option_name}{see}"
        close = difflib.get_close_matches(error.option_name, error.possibilities or (), 1, _SUGGESTION_CUTOFF)
        if close:
            text += f"; did you mean {close[0]}?"
    elif error.message.startswith("No such command"):
        text = f"{_sentence(error.message)}{see}"
    elif error.message.startswith("Got unexpected extra argument"):
        extra = error.message.rpartition("(")[2].rstrip(")")
        text = f"unexpected argument {extra!r}{see}"
    else:
        text = _sentence(error.message)
    return f"error: {printable(text, one_line=True)}"


def _conventional_metavar(parameter: Any) -> str | None:
    """The metavar the ecosystem writes for a parameter without one: `REPO` for an argument, else from its type
    (`N`, `SECONDS`, `TEXT`, `PATH`, `low|high|max`); None for a flag."""
    if getattr(parameter, "is_flag", False) or getattr(parameter, "count", False):
        return None
    if isinstance(parameter, TyperArgument):
        return str(parameter.name).upper()
    described = parameter.type_descriptor
    if described.is_choice:
        return "|".join(str(getattr(choice, "value", choice)) for choice in described.choices or ())
    if described.is_path:
        return "PATH"
    annotation = described.annotation
    element = getattr(annotation, "__args__", (annotation,))[0] if described.is_list else annotation
    if element in (int, float):
        return "SECONDS" if element is float and str(parameter.name).endswith(_SECONDS_SUFFIXES) else "N"
    if isinstance(element, type) and issubclass(element, PurePath):
        return "PATH"
    return "TEXT"


def _exit_with_one_line(main: Callable[..., Any], standalone_mode: bool, **arguments: Any) -> Any:
    """Run click's `main` with its errors as one `error:` line on stderr (exit 2 for usage, 1 for the rest) and
    no-arguments help on stdout; `standalone_mode` as click's (False: return what the command returned)."""
    try:
        result = main(standalone_mode=False, **arguments)
    except NoArgsIsHelpError as error:
        typer.echo(error.ctx.get_help())
        result = error.exit_code
    except UsageError as error:
        typer.echo(usage_line(error), err=True)
        result = error.exit_code
    except ClickException as error:
        typer.echo(f"error: {printable(_sentence(error.format_message()), one_line=True)}", err=True)
        result = error.exit_code
    except typer.Abort:
        typer.echo("error: aborted", err=True)
        result = EXIT_FAILED
    if not standalone_mode:
        return result
    _exit(result)


def _exit(result: Any) -> NoReturn:
    # With standalone_mode off, click returns `typer.Exit`'s code and a command's own return value alike.
    sys.exit(result if isinstance(result, int) else 0)


class _Conventions:
    """What a command and a group share: conventional metavars, one-line errors (a command runs alone too:
    `python -m agent pack`), and its whole first sentence in a group's list (click cuts it at 45 columns with
    "...")."""

    params: list[Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for parameter in self.params:
            if parameter.metavar is None:
                parameter.metavar = _conventional_metavar(parameter)

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, **kwargs: Any) -> Any:
        standalone = kwargs.pop("standalone_mode", True)
        return _exit_with_one_line(super().main, standalone, args=args, prog_name=prog_name, **kwargs)  # type: ignore[misc]

    def get_short_help_str(self, limit: int = 45) -> str:
        return str(super().get_short_help_str(limit=_WHOLE_SENTENCE))  # type: ignore[misc]


class Command(_Conventions, TyperCommand):
    """A command whose usage line has no `{}` around required arguments (typer's) and whose arguments are listed
    by their metavar alone (typer adds their type: `REPO <path>`)."""

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        return [piece.removeprefix("{").removesuffix("}") for piece in super().collect_usage_pieces(ctx)]

    def format_options(self, ctx: typer.Context, formatter: Any) -> None:
        sections: dict[str, list[tuple[str, str]]] = {"Arguments": [], "Options": []}
        for parameter in self.get_params(ctx):
            record = parameter.get_help_record(ctx)
            if record is None:
                continue
            if isinstance(parameter, TyperArgument):
                sections["Arguments"].append((_parameter_name(parameter), record[1]))
            else:
                sections["Options"].append(record)
        for title, records in sections.items():
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)


class Commands(_Conventions, TyperGroup):
    """A group of the product's commands."""


CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": HELP_WIDTH}


class CommandGroup(typer.Typer):
    """A Typer with the product's conventions: plain help (no rich markup, so `[environment]` and `[default: …]`
    stay text), `-h`, one-line errors, help when called bare; every command of it is a `Command`."""

    def __init__(self, help: str, *, cls: type[Commands] = Commands, **kwargs: Any) -> None:
        kwargs.setdefault("no_args_is_help", True)
        super().__init__(
            help=help,
            cls=cls,
            rich_markup_mode=None,
            add_completion=False,
            context_settings=CONTEXT_SETTINGS,
            **kwargs,
        )

    def command(self, name: str | None = None, *, cls: type[TyperCommand] | None = None, **kwargs: Any) -> Any:
        return super().command(name, cls=cls or Command, **kwargs)
