"""One night file per night name on a repository. The task record's `nights` names the file that claimed the name;
a different file naming that night on that repository is refused before anything is created (one line naming
both). Files are the same when their resolved paths are (a link to the night file is that file); their content
is not compared, so a copy is a second file. When the file that claimed the name is gone, does not read as a
night file, or no longer names that night or that repository, it was moved, renamed or changed: the new file
takes the name over, and one line says so."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agent.nights.errors import NightError
from agent.nights.plan import record_store
from agent.nights.record import RecordStore
from agent.protocol.config import NightConfig
from agent.protocol.nights import TaskRecordFile
from agent.settings.layers import SettingsError
from agent.settings.night_file import night_claim
from agent.worktree.workspace import WorkspaceError, open_repository, user_git


def _still_claims(recorded: str, name: str, repo: Path) -> bool:
    try:
        claimed_name, repositories = night_claim(Path(recorded))
    except SettingsError:  # gone, unreadable or no night file any more
        return False
    return claimed_name == name and repo.resolve() in repositories


def refuse_a_second_night_file(night: NightConfig, hooks_dir: Path) -> None:
    """Reads the records only (a missing or unparsable one claims nothing: it is rebuilt, and said, later); a
    repository that does not open is preflight's to name."""
    if night.name is None or night.night_file is None:
        return
    here = night.night_file.resolve()
    for path in night.repositories():
        try:
            repo = open_repository(path)
        except WorkspaceError:
            continue
        store = record_store(night.runs_dir, repo, user_git(repo, hooks_dir), night.name, {}, "claim", lambda _: None)
        recorded = store.load().nights.get(night.name)
        if recorded and Path(recorded).resolve() != here and _still_claims(recorded, night.name, path):
            raise NightError(
                f"{night.night_file}: night {night.name!r} on {path} is {recorded}'s: one night file per night "
                'name (give one of them another name = "...")'
            )


def claim(stores: dict[str, RecordStore], night: NightConfig, log: Callable[[str], None]) -> None:
    """The night's name on each repository of its plan, for this file (under the record's lock)."""
    if night.name is None or night.night_file is None:
        return
    name, here = night.name, str(night.night_file.resolve())
    for repo, store in stores.items():

        def change(record: TaskRecordFile, repo: str = repo) -> None:
            before = record.nights.get(name)
            if before and Path(before).resolve() != Path(here):
                log(f"night {name!r} on {repo} was {before}'s, which no longer names it there: it is {here}'s now")
            record.nights[name] = here

        store.update(change)
