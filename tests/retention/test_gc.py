"""`refactor-agent gc` on a runs directory that real runs made (the scripted model, sandboxes on this machine, real
git): four finished runs, one killed that can be resumed, their baselines, a resume snapshot a finished run left,
a stale scratch directory, saved prefixes and planted links. Asserted from the files and refs left."""

from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.environment.build import ENV_LABEL
from agent.environment.plan import ENV_REPOSITORY
from agent.protocol.config import RunConfig
from agent.server.kv_store import KVCacheStore, SavedSlot, SlotLayout, packed
from agent.worktree.workspace import WIP_REF_PREFIX
from sandbox.models import DEFAULT_IMAGE

from support import background
from support.environment_images import own_repository_name
from support.killed_runs import THREE_STEPS, killed_run, wip_refs
from support.local_sandbox import LocalSandboxes
from support.nights import night_fixture
from support.repos import checkout_fingerprint, git, made_at_a_root, make_repo, once_made
from support.scripted_model import ScriptedModel, run_in_process
from support.scripted_server import Hold, Reply, ScriptedServer

# Older than the killed run (whose id is now): the newest of them is the one run within --keep-runs 1.
GONE = "20261101-010000-aaaa"  # its branch deleted since: nothing holds its record any more
WAITING = "20261102-010000-bbbb"  # its branch still at its commit: the record is the evidence for review
NOTHING = "20261103-010000-cccc"  # no changes, no branch
NEWEST = "20261104-010000-dddd"
DAY = 86400
NO_DOCKER = "unix:///nonexistent/docker.sock"


def finish(summary: str) -> Reply:
    return Reply(tool_calls=[("finish", {"summary": summary})])


def _finished_run(tmp_path: Path, repo: Path, run_id: str, script: list) -> None:
    config = RunConfig(repo=repo, tasks=[f"Task of {run_id}"], runs_dir=tmp_path / "runs", max_turns=10)
    run_in_process(config, ScriptedModel(script), run_id=run_id, sandboxes=LocalSandboxes(tmp_path))


def _prefix(store: KVCacheStore, name: str, last_used: float) -> str:
    """A saved prefix of 600 MiB as its metadata says (the file itself is small: eviction goes by the metadata)."""
    layout = SlotLayout(slots=1, unified=False)
    saved = SavedSlot.of("a" * 32, layout, "prefix", "b" * 32, packed([ord(character) for character in name]))
    (store.directory / store.filename(saved.digest)).write_bytes(b"k")
    entry = store.record(saved).model_copy(update={"bytes": 600 * 2**20, "last_used": last_used})
    store._write(store._meta(saved.digest), entry.model_dump_json())
    return saved.digest


class Garbage:
    """The state gc works on, and what it must leave."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.repo, self.killed, _ = killed_run(root, [*THREE_STEPS, Hold()], "Add one, two and three")
        self.runs = root / "runs"
        for run_id in (GONE, WAITING, NEWEST):
            step = Reply(tool_calls=[("create_file", {"path": f"{run_id}.txt", "content": "x\n"})])
            _finished_run(root, self.repo, run_id, [step, finish(f"Add {run_id}")])
        _finished_run(root, self.repo, NOTHING, [finish("nothing to change")])
        git(self.repo, "branch", "-D", f"refactor-agent/{GONE}/1-task-of-{GONE}")
        # A resume snapshot a finished run left behind (its process died after settling, before dropping it).
        git(self.repo, "update-ref", f"{WIP_REF_PREFIX}{NEWEST}/1", "HEAD")
        # A snapshot of a run this runs directory has no record of: another runs directory's, maybe to resume.
        git(self.repo, "update-ref", f"{WIP_REF_PREFIX}20261001-000000-eeee/1", "HEAD")
        self.outside = root / "outside"
        self.outside.mkdir()
        # A finished run's summary, behind a link named like a run: never treated as a run, never removed.
        (self.outside / "summary.json").write_bytes((self.runs / GONE / "summary.json").read_bytes())
        (self.outside / "old.json").write_text("{}")
        os.symlink(self.outside, self.runs / "20261001-000000-ffff")  # a link named like a run
        baselines = self.runs / ".baselines"
        self.baselines = sorted(path.name for path in baselines.iterdir())
        assert self.baselines, "the runs stored their baselines"
        old = time.time() - 20 * DAY
        self.old_baseline = self.baselines[0]
        os.utime(baselines / self.old_baseline, (old, old))
        os.symlink(self.outside / "old.json", baselines / ("f" * 32 + ".json"))
        os.utime(baselines / ("f" * 32 + ".json"), (old, old), follow_symlinks=False)
        self.prefixes = root / "kv-cache"
        self.prefixes.mkdir()
        store = KVCacheStore(self.prefixes)
        self.oldest_prefix = _prefix(store, "one", time.time() - 3 * DAY)
        self.newer_prefix = _prefix(store, "two", time.time() - DAY)
        self.scratch = root / "scratch"
        self.stale = sorted(path.name for path in self.scratch.glob("refactor-agent-run-*"))
        assert self.stale, "the killed run left its scratch directory"

    def note_what_stays(self) -> None:
        self.branches = git(self.repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads")
        self.fingerprint = checkout_fingerprint(self.repo)
        self.main_worktree = self.fingerprint["worktrees"].split("\n\n")[0] + "\n\n"

    def gc(self, *args: str) -> list[str]:
        options = ["--runs-dir", str(self.runs), "--prefix-dir", str(self.prefixes), "--keep-runs", "1"]
        # The two saved prefixes (1.2 GiB) do not fit in 1 GiB, one does.
        bounds = ["--keep-baselines", "14d", "--prefix-cache-gib", "1"]
        # No Docker here: the fixture's repository is named `repo`, as other tests' are, whose images are theirs.
        environment = {"TMPDIR": str(self.scratch), "DOCKER_HOST": NO_DOCKER}
        result = CliRunner().invoke(app, ["gc", *options, *bounds, *args], env=environment)
        assert result.exit_code == 0, result.output
        return result.output.splitlines()

    def runs_left(self) -> list[str]:
        return sorted(path.name for path in self.runs.iterdir() if not path.name.startswith("."))

    def left_alone(self) -> None:
        """What gc never touches: the user's branches, checkout, worktrees; anything a link leads to."""
        assert git(self.repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads") == self.branches
        now = checkout_fingerprint(self.repo)
        # Of the worktrees only the killed run's may go, with its scratch directory (git's record of it too).
        assert now.pop("worktrees") in (self.fingerprint["worktrees"], self.main_worktree)
        assert now == {name: value for name, value in self.fingerprint.items() if name != "worktrees"}
        assert sorted(path.name for path in self.outside.iterdir()) == ["old.json", "summary.json"]


@dataclass(frozen=True, eq=False)
class GarbageState:
    """The state, made once per session at a root of its own (a killed run and four finished ones), with a copy of
    it to put back before each test (support/repos.py: made_once); made in the background as collection ends
    (support/background.py) for the tests that mark it."""

    def __call__(self) -> tuple[Garbage, Path, Path]:
        return made_at_a_root(Garbage)


GARBAGE = GarbageState()


@pytest.fixture
def garbage(monkeypatch: pytest.MonkeyPatch) -> Garbage:
    """The state as it was made, put back where it was made (links stay links, the old baseline's time is kept)."""
    made = once_made(GARBAGE, lambda: background.made(GARBAGE), lambda made: made.repo)
    made.note_what_stays()
    monkeypatch.setattr("tempfile.tempdir", str(made.scratch))  # where gc looks for scratch directories
    return made


@pytest.mark.killed
@pytest.mark.started_at_collection(GARBAGE)
def test_dry_run_says_what_would_go_and_removes_nothing(garbage: Garbage) -> None:
    runs, refs = garbage.runs_left(), wip_refs(garbage.repo)
    lines = garbage.gc("--dry-run")
    assert f"would remove run {GONE} " in "\n".join(lines)
    assert any(line.startswith(f"would remove run {NOTHING} (") for line in lines), lines
    assert lines[-1].startswith("gc: would remove 2 runs (") and lines[-1].endswith("; nothing was removed (--dry-run)")
    assert garbage.runs_left() == runs and wip_refs(garbage.repo) == refs
    baselines = sorted(path.name for path in (garbage.runs / ".baselines").iterdir())
    assert baselines == sorted([*garbage.baselines, "f" * 32 + ".json"])
    assert len(os.listdir(garbage.prefixes)) == 4
    assert sorted(path.name for path in garbage.scratch.glob("refactor-agent-run-*")) == garbage.stale
    garbage.left_alone()


@pytest.mark.killed
@pytest.mark.started_at_collection(GARBAGE)
def test_gc_removes_what_is_beyond_the_bounds_and_keeps_what_is_still_needed(garbage: Garbage) -> None:
    lines = garbage.gc()
    killed = garbage.killed.name
    assert garbage.runs_left() == sorted([WAITING, NEWEST, killed, "20261001-000000-ffff"])
    branch = f"refactor-agent/{WAITING}/1-task-of-{WAITING}"
    assert f"kept run {WAITING}: {branch} still holds its commit" in lines
    assert f"kept run {killed}: it is running or can be resumed" in lines
    assert sorted(line.split(" (")[0] for line in lines if line.startswith("removed run ")) == [
        f"removed run {GONE}",
        f"removed run {NOTHING}",
    ]
    # The finished run's snapshot went; the resumable run's and the unknown run's stayed.
    assert wip_refs(garbage.repo) == sorted(
        [*(ref for ref in wip_refs(garbage.repo) if killed in ref), f"{WIP_REF_PREFIX}20261001-000000-eeee/1"]
    )
    assert any(killed in ref for ref in wip_refs(garbage.repo))
    assert f"removed wip refs of run {NEWEST} in {garbage.repo}: 1 resume snapshot of a finished run" in lines
    baselines = sorted(path.name for path in (garbage.runs / ".baselines").iterdir())
    assert baselines == sorted([*garbage.baselines[1:], "f" * 32 + ".json"]), "the old one went, the link stayed"
    assert sorted(os.listdir(garbage.prefixes)) == [f"{garbage.newer_prefix}.bin", f"{garbage.newer_prefix}.json"]
    assert f"removed saved prefix {garbage.oldest_prefix} (600.0 MiB): least recently used, to stay under 1 GiB" in (
        "\n".join(lines)
    )
    assert list(garbage.scratch.glob("refactor-agent-run-*")) == []
    assert not [line for line in lines if "20261001-000000-ffff" in line], "a link is not a run"
    assert f"kept every environment image: Docker is not reachable: Docker daemon unreachable at {NO_DOCKER}" in (
        "\n".join(lines)
    )
    assert garbage.gc()[-1] == "gc: removed nothing", "a second gc finds nothing more"
    garbage.left_alone()


def test_a_repository_that_is_not_one_is_refused_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["gc", "--runs-dir", str(tmp_path / "runs"), "--repo", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {tmp_path} is not a git repository (run `git init` and commit first)"


def test_a_bad_bound_is_refused_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["gc", "--runs-dir", str(tmp_path), "--keep-baselines", "soon"])
    assert (result.exit_code, result.output.strip()) == (
        2,
        "error: command line: keep_baselines: 'soon' is not a duration such as 45s, 90m, 5h or 14d",
    )


@pytest.mark.docker
def test_old_environment_images_are_removed_and_used_ones_kept(tmp_path: Path) -> None:
    client = docker.from_env()
    with own_repository_name("gc") as name:
        repo = make_repo(tmp_path / name)
        tags = []
        for number in range(4):  # oldest first; a label of its own each, so that each is an image of its own
            dockerfile = f"FROM {DEFAULT_IMAGE}\nLABEL {ENV_LABEL}={name} number={number}\n"
            tag = f"{ENV_REPOSITORY}:{name}-{number:012d}"
            client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
            tags.append(tag)
            time.sleep(1.1)  # Created has a second's resolution in some daemons' listings
        used = client.containers.create(tags[1], command="true", labels={"refactor-agent-test": name})
        try:
            result = CliRunner().invoke(
                app,
                [
                    "gc",
                    "--runs-dir",
                    str(tmp_path / "runs"),
                    "--repo",
                    str(repo),
                    "--keep-images",
                    "1",
                    "--prefix-dir",
                    str(tmp_path / "none"),
                ],
            )
            assert result.exit_code == 0, result.output
            left = sorted(
                tag
                for image in client.images.list(name=ENV_REPOSITORY)
                for tag in image.tags
                if tag.startswith(f"{ENV_REPOSITORY}:{name}-")
            )
            assert left == [tags[1], tags[3]], "the newest, and the one a container uses"
            lines = result.output.splitlines()
            assert f"removed environment image {tags[0]}: beyond the newest 1 of its repository" in lines
            assert f"removed environment image {tags[2]}: beyond the newest 1 of its repository" in lines
            assert any(line.startswith(f"kept environment image {tags[1]}: ") for line in lines), lines
        finally:
            used.remove(force=True)


@pytest.mark.parametrize("switch", ["on", "off"])
def test_a_night_ends_by_applying_the_bounds_unless_gc_is_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    fixture = night_fixture(tmp_path, monkeypatch)
    baselines = fixture.runs / ".baselines"
    baselines.mkdir(parents=True)
    old_baseline = baselines / ("a" * 32 + ".json")
    old_baseline.write_text("{}")
    old = time.time() - 20 * DAY
    os.utime(old_baseline, (old, old))
    with ScriptedServer([]) as server:
        # A repository the night skips (nothing to run): its end still applies the bounds.
        fixture.night_file.write_text(
            f'name = "nightly"\n[defaults]\nserver = "{server.url}"\nruns_dir = "{fixture.runs}"\ngc = "{switch}"\n'
            f'[[repo]]\npath = "{fixture.repo}"\nif_path_exists = "setup.cfg"\ntasks = ["Add units"]\n'
        )
        result = CliRunner().invoke(app, ["night", str(fixture.night_file)], env={"XDG_STATE_HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output
    removed = f"removed baseline {old_baseline.name} (2 B): older than 14 days"
    if switch == "on":
        assert removed in result.output.splitlines() and not old_baseline.exists()
        assert "gc: removed 1 baseline (2 B)" in result.output.splitlines()
    else:
        assert removed not in result.output and old_baseline.exists()


def test_history_refs_beyond_the_bound_go_and_the_one_the_branch_is_at_stays(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "billing")
    prefix = "refs/refactor-agent/history/nightly/add-units/"
    commits = []
    for night in range(1, 5):  # four nights' results of one task, oldest first
        git(repo, "commit", "-q", "--allow-empty", "-m", f"night {night}")
        commits.append(git(repo, "rev-parse", "HEAD").strip())
        git(repo, "update-ref", f"{prefix}2026110{night}-010000-abcd", commits[-1])
    git(repo, "update-ref", "refs/refactor-agent/history/nightly/other/20261101-010000-abcd", commits[0])
    git(repo, "branch", "refactor-agent/nightly/add-units", commits[0])  # the user put it back to night 1's
    branches = git(repo, "for-each-ref", "refs/heads")
    places = ["--runs-dir", str(tmp_path / "runs"), "--repo", str(repo), "--prefix-dir", str(tmp_path / "none")]
    result = CliRunner().invoke(app, ["gc", *places, "--keep-history", "2"], env={"DOCKER_HOST": NO_DOCKER})
    assert result.exit_code == 0, result.output
    left = git(repo, "for-each-ref", "--format=%(refname)", "refs/refactor-agent/history/").split()
    assert left == [
        f"{prefix}20261101-010000-abcd",  # beyond the bound, but its branch is at it
        f"{prefix}20261103-010000-abcd",
        f"{prefix}20261104-010000-abcd",
        "refs/refactor-agent/history/nightly/other/20261101-010000-abcd",  # another task's only one
    ]
    assert f"removed history ref {prefix}20261102-010000-abcd in {repo}: beyond the newest 2 of its task" in (
        result.output.splitlines()
    )
    assert git(repo, "for-each-ref", "refs/heads") == branches
