"""`refactor-agent schedule`: the night file run every night, by cron or by a systemd timer.

cron: one line in the current user's crontab (read with `crontab -l`, written back whole with `crontab -`), marked
with a comment naming the night file, so installing again replaces it and every other line stays as it was.
systemd: a service and a timer named after the night file, as user units (system units when root). Output goes
to schedule.log in the runs directory.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from agent.commands import CommandGroup, one_line_errors
from agent.safety.private_dirs import private_dir
from agent.settings.layers import ConfigFiles, Layer, SettingsError, Source
from agent.settings.night_file import load_night
from agent.worktree.workspace import task_slug

MARKER = "# refactor-agent night "
UNIT_PREFIX = "refactor-agent-night-"
LOG_NAME = "schedule.log"

schedule_app = CommandGroup("Run a night file every night (cron or a systemd timer).")


class ScheduleError(Exception):
    """str() is the one line the user sees."""


def _at(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d{1,2}):(\d{2})", text.strip())
    if match is None or int(match.group(1)) > 23 or int(match.group(2)) > 59:
        raise ScheduleError(f"--at {text}: not a time of day (HH:MM)")
    return int(match.group(1)), int(match.group(2))


def _plain(what: str, text: str) -> str:
    """`text` for a crontab line or a unit file: refused when it holds a control character. A newline in a night
    file's folder would add a line of the attacker's to the crontab (`* * * * * ...`) or the unit
    (`ExecStartPre=...`); no quoting keeps a newline inside one crontab line."""
    bad = next((character for character in text if unicodedata.category(character) == "Cc"), None)
    if bad is not None:
        raise ScheduleError(f"{what} {text!r}: has a control character ({bad!r}): rename it to schedule it")
    return text


def _night_command(night_file: Path, runs_dir: Path) -> list[str]:
    return [
        _plain("the Python interpreter", sys.executable), "-m", "agent", "night",
        _plain("the night file", str(night_file)), "--runs-dir", _plain("the runs directory", str(runs_dir)),
    ]  # fmt: skip


def _search_path() -> str:
    return _plain("PATH", os.environ.get("PATH", "/usr/bin:/bin"))


def _crontab() -> list[str] | None:
    """The user's crontab lines; None where there is no cron at all (no `crontab` binary: systemd machines)."""
    try:
        listed = subprocess.run(["crontab", "-l"], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ScheduleError(f"crontab: cannot run it: {error.strerror}") from None
    if listed.returncode != 0:
        if "no crontab" in listed.stderr:
            return []
        raise ScheduleError(f"crontab -l failed: {listed.stderr.strip() or listed.returncode}")
    return listed.stdout.splitlines()


def _write_crontab(lines: list[str]) -> None:
    text = "".join(line + "\n" for line in lines)
    written = subprocess.run(["crontab", "-"], input=text, capture_output=True, text=True, check=False)
    if written.returncode != 0:
        raise ScheduleError(f"crontab - failed: {written.stderr.strip() or written.returncode}")


def _cron_escaped(text: str) -> str:
    """cron turns an unescaped % of the command into a newline (the rest becomes its stdin); it drops the
    backslash of `\\%` and keeps every other backslash as it is."""
    return text.replace("%", "\\%")


def _marker(night_file: Path) -> str:
    return _cron_escaped(f"{MARKER}{night_file}")


def cron_line(night_file: Path, runs_dir: Path, hour: int, minute: int) -> str:
    """The crontab line: a shell command (every word quoted for sh, then escaped for cron) and our marker, a
    shell comment. The working directory is the night file's, for its ./refactor-agent.toml."""
    command = shlex.join(_night_command(night_file, runs_dir))
    log = shlex.quote(str(runs_dir / LOG_NAME))
    path = shlex.quote("PATH=" + _search_path())
    line = f"cd {shlex.quote(str(night_file.parent))} && env {path} {command} >> {log} 2>&1"
    return f"{minute} {hour} * * * {_cron_escaped(line)} {_marker(night_file)}"


def _is_ours(line: str, night_file: Path | None) -> bool:
    return line.endswith(_marker(night_file)) if night_file is not None else MARKER in line


def unit_name(night_file: Path) -> str:
    digest = hashlib.sha256(str(night_file).encode()).hexdigest()[:8]
    return f"{UNIT_PREFIX}{task_slug(night_file.stem, 30)}-{digest}"


def default_unit_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/etc/systemd/system")
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "systemd" / "user"


def _unit_quoted(text: str) -> str:
    """A quoted word of Environment= (C escapes, % specifiers)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%") + '"'


def _unit_argument(text: str) -> str:
    """A quoted word of ExecStart=, which also expands $VARIABLES: $$ is a dollar sign."""
    return _unit_quoted(text).replace("$", "$$")


def _unit_raw(what: str, text: str) -> str:
    """A value systemd takes as it is written (WorkingDirectory=, Description=, append:PATH): quotes would be part
    of it, only % specifiers are expanded. Whitespace around it would be dropped and a backslash at its end would
    join the next line to it: refused."""
    if text != text.strip() or text.endswith("\\"):
        raise ScheduleError(f"{what} {text!r}: begins or ends with a space or a backslash: rename it to schedule it")
    return text.replace("%", "%%")


def systemd_units(night_file: Path, runs_dir: Path, hour: int, minute: int) -> dict[str, str]:
    name = unit_name(night_file)
    command = _night_command(night_file, runs_dir)  # checked for control characters, as is PATH
    log = _unit_raw("the runs directory", str(runs_dir / LOG_NAME))
    description = _unit_raw("the night file", f"refactor-agent night {night_file}")
    service = (
        f"[Unit]\nDescription={description}\n\n"
        f"[Service]\nType=oneshot\nWorkingDirectory={_unit_raw('its folder', str(night_file.parent))}\n"
        f"Environment={_unit_quoted('PATH=' + _search_path())}\n"
        f"ExecStart={' '.join(_unit_argument(part) for part in command)}\n"
        f"StandardOutput=append:{log}\nStandardError=append:{log}\n"
    )
    timer = (
        f"[Unit]\nDescription={description}\n\n"
        f"[Timer]\nOnCalendar=*-*-* {hour:02d}:{minute:02d}:00\nPersistent=true\n\n"
        "[Install]\nWantedBy=timers.target\n"
    )
    return {f"{name}.service": service, f"{name}.timer": timer}


def _checked_night(night_file: Path, runs_dir: Path | None) -> tuple[Path, Path]:
    """The night file, loaded as `night` would load it (so a broken one is refused now, not at 1 a.m.), and the
    runs directory it will use, both absolute."""
    night_file = night_file.absolute()
    given = {"runs_dir": runs_dir} if runs_dir is not None else {}
    # Read as the scheduled `night` will read it: in the night file's folder.
    config_files = ConfigFiles(directory=night_file.parent)
    night = load_night(night_file, config_files, Layer(Source("command line"), given), log=typer.echo)
    runs = night.runs_dir if night.runs_dir.is_absolute() else night_file.parent / night.runs_dir
    return night_file, runs


def _one_line(action: Callable[[], None]) -> None:
    with one_line_errors(ScheduleError, SettingsError):
        action()


UnitDirOption = Annotated[
    Path | None,
    typer.Option(help="Where systemd units go [default: ~/.config/systemd/user; /etc/systemd/system as root]."),
]


@schedule_app.command("install")
def install(
    night_file: Annotated[Path, typer.Argument(help="The night file to run every night.")],
    at: Annotated[str, typer.Option(help="Local time of day, HH:MM.")],
    systemd: Annotated[
        bool, typer.Option("--systemd/--cron", help="A systemd timer instead of a crontab line.")
    ] = False,
    runs_dir: Annotated[Path | None, typer.Option(help="Where run records (and schedule.log) go.")] = None,
    unit_dir: UnitDirOption = None,
) -> None:
    """Run NIGHT_FILE every day at --at; installing again replaces the earlier schedule of the same file."""

    def act() -> None:
        hour, minute = _at(at)
        night, runs = _checked_night(night_file, runs_dir)
        # Made (and checked) before anything is written.
        schedule = systemd_units(night, runs, hour, minute) if systemd else cron_line(night, runs, hour, minute)
        private_dir(runs)
        if isinstance(schedule, dict):
            directory = unit_dir or default_unit_dir()
            directory.mkdir(parents=True, exist_ok=True)
            for name, text in schedule.items():
                (directory / name).write_text(text, encoding="utf-8")
            user = "" if directory == Path("/etc/systemd/system") else " --user"
            typer.echo(f"wrote {directory / unit_name(night)}.service and .timer; log: {runs / LOG_NAME}")
            typer.echo(
                f"enable it: systemctl{user} daemon-reload && systemctl{user} enable --now {unit_name(night)}.timer"
            )
            return
        lines = _crontab()
        if lines is None:
            raise ScheduleError("crontab: not installed; use --systemd")
        _write_crontab([*[line for line in lines if not _is_ours(line, night)], schedule])
        typer.echo(f"crontab: {night} every day at {hour:02d}:{minute:02d}; log: {runs / LOG_NAME}")

    _one_line(act)


@schedule_app.command("list")
def list_schedules(unit_dir: UnitDirOption = None) -> None:
    """Night files scheduled by cron or systemd, with their time."""

    def act() -> None:
        for line in _crontab() or []:
            if _is_ours(line, None):
                minute, hour = line.split()[:2]
                night = line.split(MARKER, 1)[1].replace("\\%", "%")
                typer.echo(f"cron     {int(hour):02d}:{int(minute):02d}  {night}")
        directory = unit_dir or default_unit_dir()
        for timer in sorted(directory.glob(f"{UNIT_PREFIX}*.timer")):
            text = timer.read_text(encoding="utf-8", errors="replace")
            when = re.search(r"OnCalendar=\S+ (\d\d:\d\d)", text)
            night = re.search(r"Description=refactor-agent night (.*)", text)
            name = night.group(1).replace("%%", "%") if night else "?"
            typer.echo(f"systemd  {when.group(1) if when else '?'}  {name}  ({timer.name})")

    _one_line(act)


@schedule_app.command("remove")
def remove(
    night_file: Annotated[Path, typer.Argument(help="The night file whose schedule to remove.")],
    unit_dir: UnitDirOption = None,
) -> None:
    """Remove NIGHT_FILE's crontab line and systemd units (the night file itself is left alone)."""

    def act() -> None:
        night = night_file.absolute()
        removed = []
        lines = _crontab() or []
        kept = [line for line in lines if not _is_ours(line, night)]
        if len(kept) != len(lines):
            _write_crontab(kept)
            removed.append("crontab line")
        directory = unit_dir or default_unit_dir()
        for suffix in (".timer", ".service"):
            unit = directory / f"{unit_name(night)}{suffix}"
            if unit.exists():
                unit.unlink()
                removed.append(unit.name)
        if not removed:
            raise ScheduleError(f"{night}: not scheduled")
        typer.echo(f"removed {', '.join(removed)} of {night}")

    _one_line(act)
