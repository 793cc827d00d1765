"""`refactor-agent schedule`: a crontab line (through a fake `crontab` that keeps the table in a file: the
machine's own crontab is never touched) or systemd units in a directory of the test's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app

from repos import make_repo

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


def test_a_bad_time_is_one_line_and_nothing_is_scheduled(crontab: Path, night_file: Path) -> None:
    code, _, errors = invoke("install", str(night_file), "--at", "25:00")
    assert (code, errors) == (2, "error: --at 25:00: not a time of day (HH:MM)\n")
    assert not crontab.exists()


def test_a_broken_night_file_is_refused_now_not_at_night(crontab: Path, night_file: Path) -> None:
    night_file.write_text(night_file.read_text() + "[defaults]\nmax_turn = 3\n")
    code, _, errors = invoke("install", str(night_file), "--at", "01:00")
    assert (code, errors) == (2, f"error: {night_file}:5: defaults.max_turn: unknown key\n")
    assert not crontab.exists()
