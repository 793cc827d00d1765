"""The command line's conventions over every command of the tree: one `error:` line and exit 2 for bad input,
help that reads at 80 columns with the ecosystem's metavars, `-h`, `--version`, `run` listed first."""

from __future__ import annotations

from importlib.metadata import version

import pytest
import typer
from typer.core import TyperArgument
from typer.testing import CliRunner

from agent.cli import app

ROOT = typer.main.get_command(app)


def _leaves(command, path: tuple[str, ...] = ()):
    subcommands = getattr(command, "commands", None)
    if not subcommands:
        yield path, command
        return
    for name, child in subcommands.items():
        yield from _leaves(child, (*path, name))


LEAVES = dict(_leaves(ROOT))
TAKING_AN_ARGUMENT = {
    path: command
    for path, command in LEAVES.items()
    if any(isinstance(parameter, TyperArgument) and parameter.required for parameter in command.params)
}


def _invoke(*arguments: str, columns: int = 80):
    return CliRunner().invoke(app, list(arguments), env={"COLUMNS": str(columns)}, prog_name="refactor-agent")


def _one_error_line(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("path", list(LEAVES), ids=" ".join)
def test_every_usage_error_is_one_line_and_exit_2(path: tuple[str, ...]) -> None:
    line = _one_error_line(_invoke(*path, "--bogus"))
    assert line == f"error: no such option --bogus; see refactor-agent {' '.join(path)} -h"
    if path in TAKING_AN_ARGUMENT:
        argument = next(parameter for parameter in LEAVES[path].params if isinstance(parameter, TyperArgument))
        line = _one_error_line(_invoke(*path))
        assert line.startswith(f"error: missing {argument.metavar}; see refactor-agent {' '.join(path)} -h")
        assert argument.metavar.isupper()


@pytest.mark.parametrize(
    ("arguments", "line"),
    [
        (["run", "r", "-t", "x", "--effort", "medium"], "error: --effort: 'medium' is not one of low, high, max"),
        (
            ["run", "r", "--max-turns", "abc"],
            "error: --max-turns: input should be a valid integer, unable to parse string as an integer",
        ),
        (["run", "r", "--parallel", "0"], "error: --parallel: input should be greater than or equal to 1"),
        (["run", "r", "extra"], "error: unexpected argument 'extra'; see refactor-agent run -h"),
        (["run", "r", "--effort"], "error: option '--effort' requires an argument"),
        (["bogus"], "error: no such command 'bogus'; see refactor-agent -h"),
        (
            ["run", "r", "--max-turn", "3"],
            "error: no such option --max-turn; see refactor-agent run -h; did you mean --max-turns?",
        ),
    ],
)
def test_a_bad_value_names_the_option_and_what_it_takes(arguments: list[str], line: str) -> None:
    assert _one_error_line(_invoke(*arguments)) == line


@pytest.mark.parametrize("path", [(), *LEAVES, *{path[:1] for path in LEAVES if len(path) > 1}], ids=" ".join)
def test_help_reads_at_80_columns(path: tuple[str, ...]) -> None:
    short, long = _invoke(*path, "-h"), _invoke(*path, "--help")
    assert short.exit_code == 0 and short.stdout == long.stdout
    lines = short.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    usage, body = lines[0], "\n".join(lines[1:])  # the usage line's `COMMAND [ARGS]...` is click's convention
    for mark in ("…", "...", "<list[", "<str>", "<int>", "<float>", "<path>", "<bool>", "╭"):
        assert mark not in body, (mark, short.stdout)
    assert "{" not in usage, usage  # typer's {repo}; a help text may name a {model} placeholder
    assert usage.startswith(f"Usage: refactor-agent {' '.join(path)}".rstrip())
    if path in TAKING_AN_ARGUMENT:
        assert usage.split()[-1].isupper()


def test_help_keeps_brackets_and_defaults_as_text() -> None:
    help_text = " ".join(_invoke("run", "-h").stdout.split())
    assert "Usage: refactor-agent run [OPTIONS] REPO" in help_text
    assert "whose [environment] table" in help_text
    assert "--effort low|high|max Reasoning effort. [default: max]" in help_text
    assert "--server URL" in help_text and "--until HH:MM" in help_text and "--deadline DURATION" in help_text


def test_version_and_run_listed_first() -> None:
    result = _invoke("--version")
    assert result.exit_code == 0 and result.stdout == f"refactor-agent {version('refactor-agent')}\n"
    listing = _invoke().stdout.splitlines()
    commands = listing[listing.index("Commands:") + 1 :]
    assert [line.split()[0] for line in commands if line[2:3].strip()][:4] == ["run", "night", "resume", "doctor"]


def test_server_start_refuses_an_unknown_option_and_passes_what_follows_the_double_dash(monkeypatch) -> None:
    started = []
    monkeypatch.setattr("agent.server.binary.find_binary", lambda given: "llama-server")
    monkeypatch.setattr("agent.server.launcher.start_server", lambda preset, **_: started.append(preset))
    line = _one_error_line(_invoke("server", "start", "--bogus"))
    assert line == "error: no such option --bogus; see refactor-agent server start -h" and not started
    result = _invoke("server", "start", "--port", "8123", "--", "--bogus", "1")
    assert result.exit_code == 0, result.output
    assert started[0].arguments()[-2:] == ["--bogus", "1"]
