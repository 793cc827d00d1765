import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import typer
import typer.testing

# typer 0.29 vendors click (as agent/commands.py reads it): no click package need be installed.
from typer._click import Command

# The tests' modules (as pytest rewrites their asserts) and the product's are compiled once and kept in their
# __pycache__ folders, which git ignores: where the environment sets PYTHONDONTWRITEBYTECODE, each session would
# rewrite and compile them all again (most of the fast tier's collection), and each CLI the tests start (which
# still reads bytecode) would compile the product again. The environment is left as it is for those processes.
sys.dont_write_bytecode = False

# The session's temporary files (tmp_path, the repositories' templates, every child process's TMPDIR) go to a tmpfs
# when there is one and TMPDIR names no other place: on this machine's disk a folder and a file took 0.4 ms to make
# and 0.14 ms to remove, on /dev/shm 0.02 ms, and a session makes and removes thousands (tests/packing and
# tests/worktree: 16.6 -> 8-11 s wall, 4.1 -> 1.9 s of system CPU). A folder per user, kept, as /tmp/pytest-of-USER
# is: pytest keeps its last three sessions' folders there.
# Tests run scripts and make device nodes in their folders: a tmpfs mounted noexec, nodev or nosuid (as a container's
# /dev/shm often is) is not used.
_TMPFS, _TMPFS_MIN_FREE = Path("/dev/shm"), 2 * 1024**3
if "TMPDIR" not in os.environ and _TMPFS.is_dir() and os.access(_TMPFS, os.W_OK):
    _free = os.statvfs(_TMPFS)
    _limited = _free.f_flag & (os.ST_NOEXEC | os.ST_NODEV | os.ST_NOSUID)
    if not _limited and _free.f_bavail * _free.f_frsize >= _TMPFS_MIN_FREE:
        _tmpfs_home = _TMPFS / f"refactor-agent-tests-{os.getuid()}"
        _tmpfs_home.mkdir(mode=0o700, exist_ok=True)
        if not _tmpfs_home.is_symlink() and _tmpfs_home.stat().st_uid == os.getuid():  # ours, not a planted one
            os.environ["TMPDIR"] = str(_tmpfs_home)
            tempfile.tempdir = None  # read again from TMPDIR (pytest's capture made a file in /tmp already)

# The test doubles and fixtures (tests/support/: the scripted server and model, sample repositories, local
# sandboxes) are imported as `support.x` from this folder.
sys.path.insert(0, str(Path(__file__).parent))
pytest_plugins = ["support.early", "support.llama_fixtures", "support.install_fixtures"]
# One copy of the interpreter's bytecode for every local sandbox of the session, its CLI child processes included
# (support/local_sandbox.py; their TMPDIR is a test's own).
from support.local_sandbox import BYTECODE_ENV, ZYGOTE_ENV, bytecode_path, stop_zygote  # noqa: E402 - support/ is importable from here on

os.environ.setdefault(BYTECODE_ENV, str(bytecode_path()))

# Nothing of a test session reaches the user's own state: the runs a command remembers (last-runs.json), saved
# prefixes and launcher state go under $XDG_STATE_HOME. Child processes inherit it; a test that needs its own sets
# it again. (The configuration folder stays the user's: pip's configuration there names the package indexes that
# environment builds relay.)
_session_home = Path(tempfile.mkdtemp(prefix="refactor-agent-tests-"))
atexit.register(shutil.rmtree, _session_home, ignore_errors=True)
os.environ["XDG_STATE_HOME"] = str(_session_home / "state")
# The session's pytest zygote, for the gate's runs in local sandboxes (support/pytest_zygote.py): started by the
# first sandbox of the session's processes, stopped when the session ends.
os.environ[ZYGOTE_ENV] = f"{os.getpid()}:{_session_home / 'zygote.sock'}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules whose tests wait for work started as collection ends (a state the background makes, marked
    started_at_collection, or an early fixture of support/early.py) run last, each whole and in the order collected:
    that work then has the rest of the session's tests to get done on the other core, instead of the session waiting
    for it at the first of them (tests/dispatch comes second of the tier)."""
    from support.early import early_fixtures

    early = early_fixtures()

    def waits(item: pytest.Item) -> bool:
        return item.get_closest_marker("started_at_collection") is not None or bool(
            early & set(getattr(item, "fixturenames", ()))
        )

    waiting = {item.module for item in items if waits(item)}  # type: ignore[attr-defined]
    items.sort(key=lambda item: getattr(item, "module", None) in waiting)


# First of the collection's hooks: the background's process (support/background.py) is forked before any of the
# others starts a thread (support/early.py's work), which a forked process would not have. Nothing for
# --collect-only: nothing runs.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    from support.background import start_at_collection

    if session.config.option.collectonly:
        return
    # The killed runs' CLIs are forked from a server that imports the CLI first (support/local_cli.py): started now,
    # it imports while the tests before them run, not when the first of them waits for it; before the background's
    # process is forked, which then forks its killed runs' CLIs from it too.
    if any(item.get_closest_marker("killed") for item in session.items):
        from support.local_cli import start_forkserver

        start_forkserver()
    start_at_collection(session.items)


def pytest_sessionfinish() -> None:
    stop_zygote()


# ... nor the user's cache: the packer's caches (token counts, outlines, symbols, churn, the estimator's
# calibration) go under the session's $XDG_CACHE_HOME, so what a developer's runs learnt never changes what a test
# sees, and the tests never fill the user's folder (several sessions at once never share one). Within a session
# the tests still share it, as one user's runs do; no test counts on a cache warmed by an earlier session. pip's
# wheel cache stays the user's (the wheel tests' setuptools, the bundle's dependencies: a cold one is the index),
# and so does the llama-server wheel scripts/setup-llama.sh built (support/install_fixtures.py: the bundle's).
from support.user_cache import USER_CACHE  # noqa: E402 - read before the session's cache replaces it

os.environ.setdefault("PIP_CACHE_DIR", str(USER_CACHE / "pip"))
os.environ["XDG_CACHE_HOME"] = str(_session_home / "cache")

# The tests' own git commands (fixture repositories, a user's commits between nights) skip the housekeeping each
# commit starts (`git maintenance run --auto`, a process per commit), and the repositories they make get empty hooks/
# and info/ folders instead of git's template (its fourteen sample hooks and description were a quarter of the files
# a session wrote, and removed again); the product's git drops GIT_CONFIG_* anyway.
_git_template = _session_home / "git-template"
for _folder in ("hooks", "info"):
    (_git_template / _folder).mkdir(parents=True)
os.environ.update(
    {
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "maintenance.auto",
        "GIT_CONFIG_VALUE_0": "false",
        "GIT_CONFIG_KEY_1": "init.templateDir",
        "GIT_CONFIG_VALUE_1": str(_git_template),
    }
)

# CliRunner builds the click command of the app at each invoke, and building the command table (typer reads every
# option's annotations) took longer than most commands the tests run: built once per app and what is registered on
# it. The commands' functions are the registered ones either way; what they look up, they look up when called.
_commands: dict[tuple[int, ...], tuple[typer.Typer, Command]] = {}


def _registered(app: typer.Typer) -> tuple[int, ...]:
    groups = [group.typer_instance for group in app.registered_groups if group.typer_instance is not None]
    return (id(app), len(app.registered_commands), *(part for group in groups for part in _registered(group)))


def _command_once(app: typer.Typer) -> Command:
    key = _registered(app)
    if key not in _commands:
        _commands[key] = (app, _build_command(app))  # the app kept alive: its id is never another's
    return _commands[key][1]


_build_command = typer.testing._get_command
typer.testing._get_command = _command_once
