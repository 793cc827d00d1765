"""Where run records go when no --runs-dir says: `runs` in the current directory, unless that lies inside a
repository the run works on (`cd repo && refactor-agent run .`). There the records would turn the checkout dirty
(the next run refuses it) and a transcript, which holds the whole repository, would sit in the work tree: they go
to the user's own folder instead. Commands that read records (`resume`, `review`) look in both places.
"""

from __future__ import annotations

from pathlib import Path

from agent.protocol.config import NightConfig
from agent.server.paths import default_state_dir

DEFAULT_RUNS_DIR: Path = NightConfig.model_fields["runs_dir"].default


def user_runs_dir() -> Path:
    """The records of runs started inside a repository they work on: $XDG_STATE_HOME/refactor-agent/runs."""
    return default_state_dir() / "runs"


def runs_dir_to_read(given: Path | None, run_id: str | None = None) -> Path:
    """The runs directory a reading command uses: the one given, else ./runs when it is a directory (and holds
    `run_id`, when one is named), else the user's own folder."""
    if given is not None:
        return given
    local = DEFAULT_RUNS_DIR if run_id is None else DEFAULT_RUNS_DIR / run_id
    return DEFAULT_RUNS_DIR if local.is_dir() else user_runs_dir()
