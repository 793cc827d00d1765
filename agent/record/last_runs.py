"""Where each repository's last runs wrote their records, remembered per user: `review` run inside a repository
finds its runs without --runs-dir (a night file's runs_dir, a cron job's), as git finds its own directory.

$XDG_STATE_HOME/refactor-agent/last-runs.json: `{"<work tree>": ["<runs dir>", ...]}`, newest first, a few runs
dirs per repository and a bounded number of repositories; readable by the user alone, replaced whole (never half
written). A file that cannot be read, is too large or is not that shape counts as empty: it is a convenience,
never a reason for a run or a review to fail.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from pathlib import Path

from agent.record.atomic import write_atomically
from agent.safety.private_dirs import private_dir
from agent.server.paths import default_state_dir

STATE_FILE = "last-runs.json"
RUNS_DIRS_PER_REPOSITORY = 5
REPOSITORIES = 50
MAX_STATE_BYTES = 256 * 1024


def state_file() -> Path:
    return default_state_dir() / STATE_FILE


def remembered() -> dict[str, list[str]]:
    """Every remembered repository with its runs dirs, newest first; {} when there is nothing usable."""
    try:
        with state_file().open("rb") as file:
            raw = file.read(MAX_STATE_BYTES + 1)
        data = json.loads(raw or b"{}")
    except (OSError, ValueError):
        return {}
    if len(raw) > MAX_STATE_BYTES or not isinstance(data, dict):
        return {}
    return {
        repository: [entry for entry in dirs if isinstance(entry, str)]
        for repository, dirs in data.items()
        if isinstance(repository, str) and isinstance(dirs, list)
    }


def remember(repositories: Iterable[Path], runs_dir: Path) -> None:
    """`runs_dir` as the newest runs dir of each repository (a night: every one of them)."""
    known = remembered()
    where = str(runs_dir.absolute())
    for repository in repositories:
        key = str(repository.resolve())
        earlier = [entry for entry in known.pop(key, []) if entry != where]
        known = {key: [where, *earlier][:RUNS_DIRS_PER_REPOSITORY], **known}  # the newest repository first
    with contextlib.suppress(OSError):
        private_dir(state_file().parent)
        # 0600 like every mkstemp file; replaced whole, so a reader never sees half of it.
        write_atomically(state_file(), json.dumps(dict(list(known.items())[:REPOSITORIES]), indent=1).encode())


def runs_dirs_of(work_tree: Path) -> list[Path]:
    """The runs dirs remembered for the repository whose work tree this is, newest first."""
    return [Path(entry) for entry in remembered().get(str(work_tree.resolve()), [])]


def every_runs_dir() -> list[Path]:
    """Every remembered runs dir, of any repository."""
    return [Path(entry) for dirs in remembered().values() for entry in dirs]
