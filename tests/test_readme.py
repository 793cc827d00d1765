"""The README against the command line it documents: every option `run` takes is in its option table, and every
flag the README gives a `refactor-agent` command is one that command takes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer

from agent.cli import app

README = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
# The README's example of a usage error names a flag that does not exist, on purpose.
WRONG_ON_PURPOSE = {"--max-turn"}


def _cli() -> Any:
    """The command table as click sees it (typer's own copy of click: its commands are duck-typed here)."""
    return typer.main.get_command(app)


def _flags(command: Any) -> set[str]:
    flags = {"--help", "-h"}
    for parameter in command.params:
        flags.update(getattr(parameter, "opts", []))
        flags.update(getattr(parameter, "secondary_opts", []))
    return flags


def _resolve(cli: Any, words: list[str]) -> tuple[Any, list[str]] | None:
    """The deepest command of `cli` that `words` name (`review pr`, `server start`, `run`) and the words after it;
    None when the first word is not a command (prose such as "refactor-agent on the host")."""
    command = cli
    for index, word in enumerate(words):
        if word not in getattr(command, "commands", {}):
            return (command, words[index:]) if index else None
        command = command.commands[word]
    return command, []


def _invocations() -> list[str]:
    """Each `refactor-agent ...` the README shows, up to where its command line ends: a shell operator, the end of
    a code span or line, a comment, or `--` (what follows goes to llama-server)."""
    text = README.replace("\\\n", " ")  # a command continued on the next line
    found = []
    for match in re.finditer(r"refactor-agent ([^\n`]*)", text):
        line = re.split(r"\s(?:&&|\|\|?|;|#|--)\s|\s--$|>>", match.group(1))[0]
        found.append(line)
    return found


def test_the_run_table_lists_every_option_of_run() -> None:
    start = README.index("### `refactor-agent run REPO`")
    table = README[start : README.index("\n\n", README.index("| --- |", start))]
    listed = set(re.findall(r"`(--[a-z][\w-]*)", table))
    run = _cli().commands["run"]
    options = [parameter for parameter in run.params if parameter.param_type_name == "option"]
    missing = [option.opts[-1] for option in options if not set(option.opts) & listed and "--help" not in option.opts]
    assert missing == [], f"run takes {missing}, which the README's run table does not list"


def test_every_flag_the_readme_gives_a_command_is_one_it_takes() -> None:
    cli = _cli()  # built once: typer reads every option's annotations at each build (3 s for the README's commands)
    unknown = set()
    checked = 0
    for invocation in _invocations():
        resolved = _resolve(cli, invocation.split())
        if resolved is None:
            continue
        command, rest = resolved
        checked += 1
        for flag in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", " ".join(rest)):
            if flag.startswith("--") and flag not in _flags(command) and flag not in WRONG_ON_PURPOSE:
                unknown.add(f"refactor-agent {command.name} {flag}")
    assert checked > 50  # the README's commands were found at all
    assert unknown == set()
