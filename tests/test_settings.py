"""Settings in layers (defaults < ~/.config/refactor-agent/config.toml < ./refactor-agent.toml < night file <
command line), each value's source named by `config show` and by every error."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.durations import format_duration, parse_duration, parse_until
from agent.night import load_night
from agent.settings import Layer, SettingsError, Source, config_file_layers, key_line, night_config

NIGHT = """# a night
[defaults]
until = "06:30"
max_turns = 3

[[repo]]
path = "/a"
tasks = ["x",
  "y"]

[[repo]]
path = "/b"
[[repo.task]]
text = "t"
max_turns = 60
[[repo.task]]
text = "u"
bogus = 1
"""


@pytest.mark.parametrize(
    ("location", "line"),
    [
        (("defaults", "max_turns"), 4),
        (("repo", 0, "tasks", 1), 8),
        (("repo", 1, "path"), 12),
        (("repo", 1, "task", 0, "max_turns"), 15),
        (("repo", 1, "task", 1, "bogus"), 18),
        (("repo", 1, "nothing"), 11),  # a key not written out: its table's header
        (("repo",), 6),
    ],
)
def test_a_key_is_found_on_its_line(location: tuple, line: int) -> None:
    assert key_line(NIGHT, location) == line


def test_durations_and_end_times() -> None:
    assert [parse_duration(text) for text in ("45s", "90m", "5h", "30", 12)] == [45, 5400, 18000, 30, 12]
    assert [format_duration(seconds) for seconds in (45, 1200, 19800)] == ["45s", "20m", "5h30m"]
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("5 days")
    now = datetime(2026, 12, 1, 23, 0).astimezone()
    assert parse_until("06:30", now) == (now + timedelta(days=1)).replace(hour=6, minute=30)  # the next morning
    with pytest.raises(ValueError, match="in the past"):
        parse_until("2026-12-01T22:00", now)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_command_line_beats_the_directory_file_which_beats_the_user_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    _write(tmp_path / "xdg/refactor-agent/config.toml", 'max_turns = 7\nrepair_rounds = 1\nserver = "http://h:1/v1"\n')
    _write(tmp_path / "work/refactor-agent.toml", "max_turns = 9\n")
    layers = [*config_file_layers(tmp_path / "work"), Layer(Source("command line"), {"repair_rounds": 4})]
    config = night_config([(tmp_path, ["x"], layers)], layers).repos[0]
    assert (config.max_turns, config.repair_rounds, config.llm.server_url) == (9, 4, "http://h:1/v1")
    assert config.llm.server_explicit


def test_config_show_says_where_each_value_comes_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    user_file = _write(tmp_path / "xdg/refactor-agent/config.toml", '# mine\nserver = "http://127.0.0.1:8081/v1"\n')
    night = _write(tmp_path / "night.toml", '[defaults]\nmax_turns = 40\n[[repo]]\npath = "/x"\ntasks = ["t"]\n')
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["config", "show", "--night", str(night)])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()}
    assert rows["server"] == ["http://127.0.0.1:8081/v1", f"{user_file}:2"]
    assert rows["max_turns"] == ["40", f"{night}:2"]
    assert rows["model"] == ["deepseek-v4-flash", "default"]
    assert rows["min_task_time"] == ["1200.0", "default"]


def test_a_bad_user_config_file_is_one_line_and_nothing_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    user_file = _write(tmp_path / "xdg/refactor-agent/config.toml", "\nmax_turns = 0\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["run", str(tmp_path), "--task", "x", "--runs-dir", str(tmp_path / "runs")])
    assert (result.exit_code, result.stderr) == (
        2,
        f"error: {user_file}:2: max_turns 0: input should be greater than or equal to 1\n",
    )
    assert not (tmp_path / "runs").exists()
    _write(user_file, "[defaults]\nmax_turns = 3\n")
    with pytest.raises(SettingsError, match=r"config.toml:1: defaults: unknown key"):
        config_file_layers(tmp_path)


def test_a_night_file_names_a_fleet_and_the_ray_executor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    night_file = _write(
        tmp_path / "night.toml",
        '[defaults]\nserver = ["http://gpu1:8080/v1", "http://gpu2:8080/v1"]\nexecutor = "ray"\naddress = "h:6379"\n'
        '[[repo]]\npath = "."\ntasks = ["t"]\n',
    )
    night = load_night(night_file, [], Layer(Source("command line"), {}))
    llm = night.repos[0].llm
    assert (llm.fleet, llm.server_url, llm.server_explicit) == (
        ["http://gpu1:8080/v1", "http://gpu2:8080/v1"],
        "http://gpu1:8080/v1",
        True,
    )
    assert (night.executor, night.ray_address) == ("ray", "h:6379")


@pytest.mark.parametrize(
    "dispatch",
    [{"server": ["http://gpu1:8080/v1", "http://gpu2:8080/v1"]}, {"executor": "ray", "address": "h:6379"}],
    ids=["fleet", "ray"],
)
def test_the_deadline_and_the_task_timeout_hold_over_a_fleet_and_on_ray(tmp_path: Path, dispatch: dict) -> None:
    now = datetime(2026, 12, 1, 1, 0).astimezone()
    given = Layer(Source("command line"), {**dispatch, "deadline": "5h", "min_task_time": "10m", "task_timeout": "90m"})
    night = night_config([(tmp_path, ["x"], [given])], [given], now=now)
    assert (night.deadline_at, night.min_task_time_s) == (now + timedelta(hours=5), 600)
    assert night.repos[0].task_timeout_s == 5400


def test_an_address_without_ray_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    options = ["--task", "x", "--runs-dir", str(runs), "--address", "h:6379"]
    result = CliRunner().invoke(app, ["run", str(tmp_path), *options])
    assert (result.exit_code, result.stderr) == (2, "error: --address: only with --executor ray\n")
    assert not runs.exists()
