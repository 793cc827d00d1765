"""`refactor-agent night NIGHT.toml`: bad files are one line naming file, line and key, and nothing starts; a good
one runs every task of every repository in one run directory with one report covering them all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import git
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from agent.cli import app
from agent.protocol.config import ContainsRule, NightConfig, RepoSelect, RetentionConfig, ShardRule, TaskSpec
from agent.record.journal import run_directories
from agent.settings.layers import ConfigFiles, Layer, Source, night_config
from agent.settings.night_file import load_night

from support.cli_runs import start_cli
from support.repos import checkout_fingerprint, make_repo
from support.scripted_server import Reply, ScriptedServer


def refused(tmp_path: Path, night: str, *options: str) -> str:
    """Runs `night` on the file; returns its stderr after checking it exited 2 and created nothing."""
    (tmp_path / "night.toml").write_text(night)
    arguments = ["night", str(tmp_path / "night.toml"), "--runs-dir", str(tmp_path / "runs"), *options]
    result = CliRunner().invoke(app, arguments, env={"XDG_CONFIG_HOME": str(tmp_path / "no-config")})
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert not (tmp_path / "runs").exists()
    return result.stderr


@pytest.mark.parametrize(
    ("night", "line"),
    [
        ('[defaults]\nmax_turn = 3\n[[repo]]\npath = "{repo}"\ntasks = ["x"]\n', "2: defaults.max_turn: unknown key"),
        (
            '[[repo]]\npath = "{repo}"\ntasks = ["x"]\nmax_turns = "many"\n',
            "4: repo.0.max_turns: input should be a valid integer, unable to parse string as an integer",
        ),
        ('[[repo]]\npath = "{repo}"\ntasks = []\n', "1: repo.0: no tasks: give tasks = [...] or [[repo.task]] tables"),
        ("[defaults]\nmax_turns = 3\n", "repo: field required"),
        (
            '[[repo]]\npath = "{repo}"\ntasks = ["x"]\n\n[[repo]]\npath = "{repo}/"\ntasks = ["y"]\n',
            "6: repo.1.path: {repo} is listed twice (also repo.0): give one [[repo]] all its tasks",
        ),
        ('[[repo]]\npath = "{repo}/missing"\ntasks = ["x"]\n', "2: repo.0.path: {repo}/missing is not a directory"),
        (
            '[defaults]\nuntil = "2020-01-01T06:30"\n[[repo]]\npath = "{repo}"\ntasks = ["x"]\n',
            "2: defaults.until: 2020-01-01T06:30 is in the past",
        ),
        (
            '[[repo]]\npath = "{repo}"\n[[repo.task]]\ntext = "x"\nserver = "http://127.0.0.1:1/v1"\n',
            "3: repo.0.task.0: server is a setting of the whole night: put it in [defaults]",
        ),
        (
            '[[repo]]\npath = "{repo}"\n[[repo.task]]\ntext = "x"\n[[repo.task]]\ntext = "y"\nmax_turns = 0\n',
            "7: repo.0.task.1.max_turns 0: input should be greater than or equal to 1",
        ),
        (
            '[defaults]\ndeadline = "soon"\n[[repo]]\npath = "{repo}"\ntasks = ["x"]\n',
            "2: defaults.deadline: 'soon' is not a duration such as 45s, 90m, 5h or 14d",
        ),
        ("[[repo]\n", "not valid TOML: "),
        (
            'name = "20261202-010000-ab12"\n[[repo]]\npath = "{repo}"\ntasks = ["x"]\n',
            "1: name: '20261202-010000-ab12' looks like a run id, whose branches are refactor-agent/<run-id>/...: "
            'set name = "..." to another name',
        ),
        (
            '[[repo]]\npath = "{repo}"\n[[repo.task]]\ntext = "x"\nshard_depth = 2\n',
            '3: repo.0.task.0: shard_depth is a detail of shard_by: give shard_by = "directory" or "codeowners"',
        ),
        (
            '[[repo]]\npath = "{repo}"\n[[repo.task]]\ntext = "x"\nid = "two words"\n',
            "5: repo.0.task.0.id: string should match pattern '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'",
        ),
        (
            '[[repo]]\npath = "{repo}"\nif_contains = { glob = "*.py" }\ntasks = ["x"]\n',
            "3: repo.0.if_contains.pattern: field required",
        ),
        (
            '[[repo]]\npath = "{repo}"\ntasks = ["Add x", "Add  x"]\n',
            "3: repo.0.tasks.1: the same task as repo.0.tasks.0 (give one an id)",
        ),
        (
            '[[repo]]\npath = "{repo}"\n[[repo.task]]\ntext = "a"\nid = "x"\n[[repo.task]]\ntext = "b"\nid = "x"\n',
            "6: repo.0.task.1: the same task as repo.0.task.0 (give one an id)",
        ),
        (
            '[defaults]\nkeep_baselines = "a fortnight"\n[[repo]]\npath = "{repo}"\ntasks = ["x"]\n',
            "2: defaults.keep_baselines: 'a fortnight' is not a duration such as 45s, 90m, 5h or 14d",
        ),
    ],
)
def test_a_bad_night_file_is_one_line_naming_file_line_and_key(tmp_path: Path, night: str, line: str) -> None:
    repo = make_repo(tmp_path / "repo")
    stderr = refused(tmp_path, night.replace("{repo}", str(repo)))
    night_file = tmp_path / "night.toml"
    expected = line.replace("{repo}", str(repo))
    if expected[0].isdigit():
        assert stderr == f"error: {night_file}:{expected}\n"
    else:
        assert stderr.startswith(f"error: {night_file}") and expected in stderr and stderr.count("\n") == 1


def _loaded(tmp_path: Path, name: str, night: str) -> NightConfig:
    night_file = tmp_path / name
    night_file.write_text(night)
    return load_night(night_file, ConfigFiles(directory=tmp_path), Layer(Source("command line"), {}), log=print)


def test_a_night_file_gives_its_name_its_tasks_identity_and_its_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    repo = make_repo(tmp_path / "repo")
    night = _loaded(
        tmp_path,
        "night.toml",
        f'name = "Billing Nightly"\n[defaults]\nruns_dir = "{tmp_path / "runs"}"\nkeep_runs = 5\n'
        'keep_baselines = "7d"\ngc = "off"\n'
        f'[[repo]]\npath = "{repo}"\nif_contains = {{ glob = "*.py", pattern = "utcnow" }}\ntasks = ["Plain one"]\n'
        '[[repo.task]]\ntext = "  Move the helpers  "\nid = "helpers"\nkind = "move"\nrepeat = true\n'
        'shard_by = "directory"\nshard_depth = 2\nmax_open = 2\nbefore = ["python -m black ."]\n',
    )
    assert night.name == "billing-nightly"
    assert [task for _, task in night.tasks()] == ["Plain one", "Move the helpers"]
    assert night.specs == [
        TaskSpec(text="Plain one"),
        TaskSpec(
            text="Move the helpers",
            id="helpers",
            kind="move",
            repeat=True,
            shard=ShardRule(by="directory", depth=2),
            max_open=2,
        ),
    ]
    assert [config.select for config in night.repos] == [
        RepoSelect(if_contains=ContainsRule(glob="*.py", pattern="utcnow"))
    ] * 2
    assert [config.before for config in night.repos] == [[], ["python -m black ."]]
    assert night.retention == RetentionConfig(keep_runs=5, keep_baselines_s=7 * 86400, after_night=False)


def test_a_night_is_named_after_its_file_and_a_run_has_no_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    repo = make_repo(tmp_path / "repo")
    night = _loaded(tmp_path, "Weekly Jobs.toml", f'[[repo]]\npath = "{repo}"\ntasks = ["x"]\n')
    assert (night.name, night.specs) == ("weekly-jobs", [TaskSpec(text="x")])
    run = night_config([(repo, ["x"], [])], [])
    assert (run.name, run.specs, run.retention) == (None, [], RetentionConfig())
    with pytest.raises(ValidationError, match="specs: one per task"):
        NightConfig(repos=run.repos, specs=[TaskSpec(text="y")])


def test_a_missing_night_file_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["night", str(tmp_path / "none.toml")])
    assert (result.exit_code, result.stderr) == (
        2,
        f"error: {tmp_path / 'none.toml'}: cannot read it: No such file or directory\n",
    )


@pytest.mark.docker
def test_a_night_over_two_repositories_leaves_one_report_covering_both(tmp_path: Path) -> None:
    billing, web = make_repo(tmp_path / "billing"), make_repo(tmp_path / "web")
    before = {repo: checkout_fingerprint(repo) for repo in (billing, web)}
    notified = tmp_path / "notified.md"
    night = f"""
[defaults]
max_turns = 5
on_finish = 'cp "$REFACTOR_AGENT_REPORT" {notified}'

[[repo]]
path = "{billing}"
tasks = ["Add the billing constant"]

[[repo]]
path = "{web}"
[[repo.task]]
text = "Add the web constant"
max_turns = 3
"""
    (tmp_path / "night.toml").write_text(night)
    script = [
        Reply(tool_calls=[("create_file", {"path": "pkg/billing.py", "content": "RATE = 3\n"})]),
        Reply(tool_calls=[("finish", {"summary": "Add the billing constant"})]),
        Reply(tool_calls=[("create_file", {"path": "pkg/web.py", "content": "PORT = 80\n"})]),
        Reply(tool_calls=[("finish", {"summary": "Add the web constant"})]),
    ]
    runs_dir = tmp_path / "runs"
    with ScriptedServer(script) as server:
        command = [
            sys.executable, "-m", "agent", "night", str(tmp_path / "night.toml"), "--server", server.url,
            "--runs-dir", str(runs_dir),
        ]  # fmt: skip
        process = start_cli(command, tmp_path / "scratch", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output.decode()

    (run_dir,) = run_directories(runs_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["repos"] == [str(billing), str(web)]
    first, second = summary["tasks"]
    assert (first["repo"], first["status"], second["repo"], second["status"]) == (
        str(billing), "committed", str(web), "committed"
    )  # fmt: skip
    for repo, task, file in ((billing, first, "pkg/billing.py"), (web, second, "pkg/web.py")):
        (commit,) = git.Repo(repo).iter_commits(f"main..{task['branch']}")
        assert list(commit.stats.files) == [file]
        assert checkout_fingerprint(repo) == before[repo]
    night_record = json.loads((run_dir / "night.json").read_text())
    assert [config["max_turns"] for config in night_record["repos"]] == [5, 3]
    report = (run_dir / "report.md").read_text()
    assert f"**repositories**: {billing}, {web}" in report
    assert "## Task 1: Add the billing constant" in report and "## Task 2: Add the web constant" in report
    assert notified.read_text() == report  # --on-finish got the report's path

    listed = CliRunner().invoke(app, ["review", "--runs-dir", str(runs_dir), "--json"])
    assert listed.exit_code == 0 and json.loads(listed.stdout)[0]["run_id"] == run_dir.name
    shown = CliRunner().invoke(app, ["review", "show", f"{run_dir.name}/2", "--runs-dir", str(runs_dir)])
    assert shown.exit_code == 0 and "PORT = 80" in shown.stdout  # the task's own repository, not the first
