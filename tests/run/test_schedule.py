"""`refactor-agent schedule`: a crontab line (through a fake `crontab` that keeps the table in a file: the
machine's own crontab is never touched) or systemd units in a directory of the test's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app

from support.repos import make_repo

FAKE_CRONTAB = """#!/bin/sh
table="$FAKE_CRONTAB_FILE"
case "$1" in
  -l) if [ -f "$table" ]; then cat "$table"; else echo "no crontab for $(id -un)" >&2; exit 1; fi ;;
  -) cat > "$table" ;;
  *) exit 2 ;;
esac
"""
OTHER_LINES = ["MAILTO=me@example.com", "5 4 * * * /usr/bin/backup --all  # mine"]


@pytest.fixture
def crontab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "crontab").write_text(FAKE_CRONTAB)
    (bin_dir / "crontab").chmod(0o755)
    table = tmp_path / "crontab.txt"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_CRONTAB_FILE", str(table))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    return table


@pytest.fixture
def night_file(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo")
    path = tmp_path / "nights" / "my night.toml"
    path.parent.mkdir()
    path.write_text(f'[[repo]]\npath = "{repo}"\ntasks = ["Rename compute_area"]\n')
    return path


def invoke(*arguments: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["schedule", *arguments])
    return result.exit_code, result.stdout, result.stderr


def test_install_adds_one_marked_line_idempotently_and_leaves_the_others(crontab: Path, night_file: Path) -> None:
    crontab.write_text("".join(line + "\n" for line in OTHER_LINES))
    assert invoke("install", str(night_file), "--at", "01:30")[0] == 0
    code, output, _ = invoke("install", str(night_file), "--at", "02:15")  # again: replaces, not adds
    assert code == 0 and "every day at 02:15" in output
    lines = crontab.read_text().splitlines()
    assert lines[:2] == OTHER_LINES and len(lines) == 3
    ours = lines[2]
    assert ours.startswith("15 2 * * * cd ") and ours.endswith(f"# refactor-agent night {night_file}")
    assert "-m agent night" in ours and f"'{night_file}'" in ours  # quoted: the name has a space
    assert f">> {night_file.parent / 'runs' / 'schedule.log'} 2>&1" in ours

    assert invoke("list") == (0, f"cron     02:15  {night_file}\n", "")
    assert invoke("remove", str(night_file))[0] == 0
    assert crontab.read_text().splitlines() == OTHER_LINES
    assert invoke("remove", str(night_file)) == (2, "", f"error: {night_file}: not scheduled\n")


def test_install_into_an_empty_crontab(crontab: Path, night_file: Path) -> None:
    assert invoke("install", str(night_file), "--at", "1:00")[0] == 0
    (line,) = crontab.read_text().splitlines()
    assert line.startswith("0 1 * * * ")


def test_systemd_units_go_to_the_given_directory(crontab: Path, night_file: Path, tmp_path: Path) -> None:
    units = tmp_path / "units"
    code, output, _ = invoke("install", str(night_file), "--at", "01:00", "--systemd", "--unit-dir", str(units))
    assert code == 0 and "systemctl --user enable --now refactor-agent-night-my-night-" in output
    timer, service = sorted(units.iterdir(), key=lambda path: path.suffix, reverse=True)
    assert timer.suffix == ".timer" and "OnCalendar=*-*-* 01:00:00" in timer.read_text()
    assert f'"{night_file}"' in service.read_text() and "StandardOutput=append:" in service.read_text()
    assert not crontab.exists()  # cron untouched
    assert invoke("list", "--unit-dir", str(units))[1].startswith(f"systemd  01:00  {night_file}  (")
    assert invoke("remove", str(night_file), "--unit-dir", str(units))[0] == 0
    assert list(units.iterdir()) == []


def test_list_and_remove_work_without_a_crontab(
    night_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A systemd machine has no `crontab` binary: the timers are listed and removed all the same."""
    units = tmp_path / "units"
    assert invoke("install", str(night_file), "--at", "02:30", "--systemd", "--unit-dir", str(units))[0] == 0
    empty = tmp_path / "no-cron"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    code, output, errors = invoke("list", "--unit-dir", str(units))
    assert (code, errors) == (0, "") and output.startswith(f"systemd  02:30  {night_file}  (")
    code, output, errors = invoke("remove", str(night_file), "--unit-dir", str(units))
    assert (code, errors) == (0, "") and output.startswith("removed refactor-agent-night-")
    assert list(units.iterdir()) == []
    assert invoke("install", str(night_file), "--at", "02:30") == (
        2,
        "",
        "error: crontab: not installed; use --systemd\n",
    )


def test_a_bad_time_is_one_line_and_nothing_is_scheduled(crontab: Path, night_file: Path) -> None:
    code, _, errors = invoke("install", str(night_file), "--at", "25:00")
    assert (code, errors) == (2, "error: --at 25:00: not a time of day (HH:MM)\n")
    assert not crontab.exists()


def test_a_broken_night_file_is_refused_now_not_at_night(crontab: Path, night_file: Path) -> None:
    night_file.write_text(night_file.read_text() + "[defaults]\nmax_turn = 3\n")
    code, _, errors = invoke("install", str(night_file), "--at", "01:00")
    assert (code, errors) == (2, f"error: {night_file}:5: defaults.max_turn: unknown key\n")
    assert not crontab.exists()


def _night_in(folder: Path, repo: Path) -> Path:
    folder.mkdir(parents=True)
    path = folder / "night.toml"
    path.write_text(f'[[repo]]\npath = "{repo}"\ntasks = ["Rename compute_area"]\n')
    return path


INJECTED = "nights\n* * * * * touch /tmp/refactor-agent-pwned #"


@pytest.mark.parametrize("writer", [[], ["--systemd"]], ids=["cron", "systemd"])
def test_a_newline_in_the_night_files_path_is_refused_and_nothing_is_written(
    crontab: Path, tmp_path: Path, writer: list[str]
) -> None:
    night_file = _night_in(tmp_path / INJECTED, make_repo(tmp_path / "repo"))
    units = tmp_path / "units"
    code, _, errors = invoke("install", str(night_file), "--at", "01:00", *writer, "--unit-dir", str(units))
    assert (code, errors) == (
        2,
        f"error: the night file {str(night_file)!r}: has a control character ('\\n'): rename it to schedule it\n",
    )
    assert not crontab.exists() and not units.exists()


def test_a_newline_in_path_is_refused_too(crontab: Path, night_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", os.environ["PATH"] + "\n* * * * * touch /tmp/refactor-agent-pwned")
    code, _, errors = invoke("install", str(night_file), "--at", "01:00")
    assert code == 2 and errors.startswith("error: PATH ") and "has a control character ('\\n')" in errors
    assert not crontab.exists()


# A folder name that needs every kind of quoting: a space, cron's %, the shell's $( ) and quotes, systemd's $ and \.
AWKWARD = "odd night %d $(touch pwned) 'q' \"dq\" back\\slash $HOME"

# What cron does to a crontab line's command (cronie's do_command.c): an unescaped % ends the command (the rest is
# its stdin), `\%` becomes %, any other backslash stays; then /bin/sh -c runs it.
CRON_COMMAND = re.compile(r"^\S+ \S+ \S+ \S+ \S+ (.*)$")


def _as_cron_runs_it(line: str) -> str:
    command, escaped = [], False
    for character in CRON_COMMAND.fullmatch(line).group(1):  # type: ignore[union-attr]
        if escaped:
            command.append(character if character == "%" else "\\" + character)
            escaped = False
        elif character == "\\":
            escaped = True
        elif character == "%":
            break
        else:
            command.append(character)
    return "".join(command)


def test_cron_runs_the_night_with_exactly_its_paths_however_odd(
    crontab: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    night_file = _night_in(tmp_path / AWKWARD, make_repo(tmp_path / "repo"))
    record = tmp_path / "argv.json"
    python = tmp_path / "bin" / "fake python"  # stands for sys.executable: records how it was called, and where
    python.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                      f"open({str(record)!r}, 'w').write(json.dumps([sys.argv[1:], os.getcwd()]))\n")  # fmt: skip
    python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(python))
    assert invoke("install", str(night_file), "--at", "01:00")[0] == 0
    (line,) = crontab.read_text().splitlines()
    subprocess.run(["/bin/sh", "-c", _as_cron_runs_it(line)], cwd=tmp_path, check=True)
    runs = night_file.parent / "runs"
    assert json.loads(record.read_text()) == [
        ["-m", "agent", "night", str(night_file), "--runs-dir", str(runs)],
        str(night_file.parent),
    ]
    assert (runs / "schedule.log").exists() and not (tmp_path / "pwned").exists()
    assert invoke("list") == (0, f"cron     01:00  {night_file}\n", "")
    assert invoke("remove", str(night_file))[0] == 0 and crontab.read_text() == ""


def test_the_systemd_units_of_an_odd_path_are_valid_units(crontab: Path, tmp_path: Path) -> None:
    night_file = _night_in(tmp_path / AWKWARD, make_repo(tmp_path / "repo"))
    units = tmp_path / "units"
    assert invoke("install", str(night_file), "--at", "01:00", "--systemd", "--unit-dir", str(units))[0] == 0
    service = next(units.glob("*.service"))
    # systemd's own parser: WorkingDirectory= is a raw path (quotes would be part of it), % and $ are escaped.
    verified = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(service)], capture_output=True, text=True, check=False
    )
    assert (verified.returncode, verified.stderr) == (0, "")
    keys = [line.split("=", 1)[0] for line in service.read_text().splitlines() if "=" in line]
    assert keys == [
        "Description", "Type", "WorkingDirectory", "Environment", "ExecStart", "StandardOutput", "StandardError",
    ]  # fmt: skip
    assert f"WorkingDirectory={str(night_file.parent).replace('%', '%%')}\n" in service.read_text()
    assert "$$(touch pwned)" in service.read_text() and "$$HOME" in service.read_text()
    assert invoke("list", "--unit-dir", str(units))[1].startswith(f"systemd  01:00  {night_file}  (")
