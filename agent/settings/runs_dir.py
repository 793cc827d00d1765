"""Where run records go when no --runs-dir says: `runs` in the current directory, unless that lies inside a
repository the run works on (`cd repo && refactor-agent run .`). There the records would turn the checkout dirty
(the next run refuses it) and a transcript, which holds the whole repository, would sit in the work tree: they go
to the user's own folder instead.

Commands that read records (`resume`, `review`) look where the repository they are run in last wrote its runs
(agent/record/last_runs.py: a night file's runs_dir, a cron job's), then in ./runs, then in the user's folder.
"""

from __future__ import annotations

from pathlib import Path

from agent.protocol.config import NightConfig
from agent.record.last_runs import every_runs_dir, runs_dirs_of, state_file
from agent.server.paths import default_state_dir

DEFAULT_RUNS_DIR: Path = NightConfig.model_fields["runs_dir"].default


class RunsNotFound(Exception):
    """No runs directory to read: str() says where it looked and what to pass."""


def user_runs_dir() -> Path:
    """The records of runs started inside a repository they work on: $XDG_STATE_HOME/refactor-agent/runs."""
    return default_state_dir() / "runs"


def work_tree_holding(directory: Path) -> Path | None:
    """The git work tree `directory` is in (found by its `.git`, no git runs), if any."""
    resolved = directory.resolve()
    return next((path for path in [resolved, *resolved.parents] if (path / ".git").exists()), None)


def _holds(runs_dir: Path, run_id: str | None) -> bool:
    return (runs_dir / run_id).is_dir() if run_id is not None else runs_dir.is_dir()


def runs_dir_to_read(given: Path | None, run_id: str | None = None, cwd: Path | None = None) -> Path:
    """The runs directory a reading command uses: the one given; else the first remembered for the repository
    `cwd` is in (holding `run_id`, when one is named); else, for a named run, any remembered one holding it; else
    ./runs; else the user's own folder (which may not exist: `gc` then has nothing to do)."""
    try:
        return existing_runs_dir(given, run_id, cwd)
    except RunsNotFound:
        return user_runs_dir()


def existing_runs_dir(given: Path | None, run_id: str | None = None, cwd: Path | None = None) -> Path:
    """As runs_dir_to_read, for the commands that show runs (`review`, `resume`): RunsNotFound, saying where it
    looked, when none of those places exists."""
    if given is not None:
        return given
    here = cwd or Path.cwd()
    work_tree = work_tree_holding(here)
    candidates = runs_dirs_of(work_tree) if work_tree is not None else []
    if run_id is not None:
        candidates += every_runs_dir()
    candidates += [here / DEFAULT_RUNS_DIR, user_runs_dir()]
    found = next((candidate for candidate in candidates if _holds(candidate, run_id)), None)
    if found is not None:
        return found
    if run_id is not None and (here / DEFAULT_RUNS_DIR).is_dir():
        return here / DEFAULT_RUNS_DIR  # the reader says the run is not there, and which runs are
    if run_id is not None and user_runs_dir().is_dir():
        return user_runs_dir()
    place = work_tree or here
    raise RunsNotFound(
        f"no runs found for {place}: none remembered in {state_file()}, no ./{DEFAULT_RUNS_DIR}, none in "
        f"{user_runs_dir()}; pass --runs-dir DIR (a night file's runs_dir)"
    )
