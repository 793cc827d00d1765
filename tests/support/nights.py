"""A named night on a fixture repository, night after night: the sample repository with four tasks (each a
scripted model's tool calls), `night` on the command line with its sandboxes on this machine and a fresh scripted
server per night, and readers of what a night leaves (branches, history refs, the task record)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

import agent.run.command
from agent.cli import app

from support import background
from support.local_sandbox import LocalSandboxes
from support.repos import SAMPLE_FILES, made_at_a_root, make_repo, once_made, refs_of
from support.scripted_server import Reply, ScriptedServer, Step

TASK_BRANCHES = "refs/heads/refactor-agent/"
T1, T2, T3, T4 = (
    "Rename compute_area to area",
    "Add a perimeter helper",
    "Add a units module",
    "Reword the area docstring",
)


def _create(path: str, content: str, summary: str) -> list[Reply]:
    return [
        Reply(tool_calls=[("create_file", {"path": path, "content": content})]),
        Reply(tool_calls=[("finish", {"summary": summary})]),
    ]


def reword(old: str) -> list[Reply]:
    return [
        Reply(tool_calls=[("str_replace", {"path": "pkg/geometry.py", "old": old, "new": "The area."})]),
        Reply(tool_calls=[("finish", {"summary": "Reword the area docstring"})]),
    ]


SCRIPTS = {
    T1: _create("pkg/area.py", "from pkg.geometry import compute_area as area\n", "Rename compute_area to area"),
    T2: _create("pkg/perimeter.py", "def perimeter(w, h):\n    return 2 * (w + h)\n", "Add a perimeter helper"),
    T3: _create("pkg/units.py", 'UNIT = "m"\n', "Add a units module"),
    T4: reword("Area of a rectangle."),
}


@dataclass
class Night:
    exit_code: int
    output: str
    requests: list[dict]  # the chat requests the night's server received

    def asked(self, task: str) -> bool:
        return any(task in json.dumps(request["messages"]) for request in self.requests)


@dataclass
class NightFixture:
    root: Path
    repo: Path
    night_file: Path
    runs: Path

    def night(
        self,
        *options: str,
        scripts: dict[str, list[Step]] | None = None,
        tasks: tuple[str, ...] = (T1, T2, T3, T4),
        tables: str | None = None,
    ) -> Night:
        """`tables`: [[repo.task]] tables instead of `tasks`."""
        with ScriptedServer(scripts=scripts or SCRIPTS) as server:
            given = tables if tables is not None else f"tasks = {json.dumps(list(tasks))}\n"
            self.night_file.write_text(
                f'name = "nightly"\n[defaults]\nserver = "{server.url}"\nruns_dir = "{self.runs}"\n'
                'test_cmd = "python3 -m pytest -q"\nmax_turns = 5\nmax_retries = 0\n'
                f'[[repo]]\npath = "{self.repo}"\n{given}'
            )
            result = CliRunner().invoke(
                app, ["night", str(self.night_file), *options], env={"XDG_CONFIG_HOME": str(self.root / "xdg")}
            )
            return Night(result.exit_code, result.output, list(server.requests))

    def branches(self) -> dict[str, str]:
        """The task branches (refactor-agent/...) and their commits, read from git's files (support/repos.py)."""
        refs = refs_of(self.repo).items()
        return {name.removeprefix("refs/heads/"): tip for name, tip in refs if name.startswith(TASK_BRANCHES)}

    def history(self) -> list[str]:
        return [name for name in refs_of(self.repo) if name.startswith("refs/refactor-agent/history/")]

    def record(self) -> dict:
        (path,) = (self.runs / ".tasks").glob("*.json")
        return json.loads(path.read_text())

    def fates(self) -> dict[str, str]:
        return {task["text"]: task["fate"] for task in self.record()["tasks"].values()}


def night_fixture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str] = SAMPLE_FILES
) -> NightFixture:
    _local_sandboxes(tmp_path, monkeypatch)
    repo = make_repo(tmp_path / "geometry", files)
    return NightFixture(tmp_path, repo, tmp_path / "nightly.toml", tmp_path / "runs")


def _local_sandboxes(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent.run.command, "docker_sandboxes", lambda: LocalSandboxes(root))


@dataclass(frozen=True, eq=False)
class NightState:
    """night_fixture (on `files`) after its first nights, each `night` of `tasks` (or `tables`) with `scripts` and
    the options of one of `nights`, in order: made once per session, and put back as they left it for each test
    (support/repos.py: made_once). A test that marks it (@pytest.mark.started_at_collection(state)) has it made in
    the background as collection ends (support/background.py): what the nights leave and say is the same. `before`
    prepares the fixture before the first night (what it makes belongs under the fixture's root)."""

    nights: tuple[tuple[str, ...], ...] = ((),)
    tasks: tuple[str, ...] = (T1, T2, T3, T4)
    scripts: dict[str, list[Step]] | None = None
    tables: str | None = None
    files: dict[str, str] = field(default_factory=lambda: SAMPLE_FILES)
    before: Callable[[NightFixture], object] | None = None

    def __call__(self) -> tuple[tuple[NightFixture, list[Night]], Path, Path]:
        """The state made at a root of its own, the root and its copy (what the background's process makes)."""
        return made_at_a_root(self._make)

    def _make(self, root: Path) -> tuple[NightFixture, list[Night]]:
        with pytest.MonkeyPatch.context() as patch:
            fixture = night_fixture(root, patch, self.files)
            if self.before is not None:
                self.before(fixture)
            nights = [
                fixture.night(*options, scripts=self.scripts, tasks=self.tasks, tables=self.tables)
                for options in self.nights
            ]
        return fixture, nights

    def made(self, monkeypatch: pytest.MonkeyPatch) -> tuple[NightFixture, list[Night]]:
        """The fixture as the nights left it (its sandboxes on this machine), and what each night said."""
        fixture, nights = once_made(self, lambda: background.made(self), lambda made: made[0].repo)
        _local_sandboxes(fixture.root, monkeypatch)
        return replace(fixture), nights


_FIRST_NIGHTS: dict[tuple[object, ...], NightState] = {}


def first_night(tasks: tuple[str, ...], before: Callable[[NightFixture], object] | None = None) -> NightState:
    """The state of after_first_night(tasks, before): one per session for each, which a test may mark."""
    return _FIRST_NIGHTS.setdefault((tasks, before), NightState(tasks=tasks, before=before))


def after_first_night(
    monkeypatch: pytest.MonkeyPatch,
    tasks: tuple[str, ...],
    before: Callable[[NightFixture], object] | None = None,
) -> NightFixture:
    """night_fixture after a first night of `tasks` (the sample repository, SCRIPTS; asserted to succeed), at a
    root of its own: the night's state as that night left it, whatever an earlier test did to it since. `before`
    prepares the fixture before that night (what it makes belongs under the fixture's root)."""
    fixture, (first,) = first_night(tasks, before).made(monkeypatch)
    assert first.exit_code == 0, first.output
    return fixture
