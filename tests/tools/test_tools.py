"""Tools as the model calls them: through the registry, with JSON arguments, in the real Docker sandbox."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import pytest

from agent.gate.test_command import detect_test_command
from sandbox import DEFAULT_IMAGE, DockerSandbox, docker_client, require_image
from tools.base import FinishRequested, ToolContext, ToolResult
from tools.output import cap_text
from tools.registry import default_registry

from support.repos import make_repo, restore_checkout

# Generous: a call that is bounded ends far sooner; one that blocks forever fails here instead of hanging the suite.
BOUND_S = 120
SECRET = "classified-4711"
T = TypeVar("T")


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerSandbox]:
    """One container for the module; each test gets the repository back as committed (see `context`).

    Beside the worktree lie a secret file and a folder, at the same absolute paths on the host and in the
    container, so that every escape below aims at something that really exists on both sides.
    """
    root = tmp_path_factory.mktemp("tools")
    repo = make_repo(root / "repo")
    (root / "secret.txt").write_text(SECRET)
    (root / "outside").mkdir()
    client = docker_client()
    require_image(client, DEFAULT_IMAGE)
    with DockerSandbox(DEFAULT_IMAGE, repo, run_id="test-tools", client=client) as box:
        outside, secret = shlex.quote(str(root / "outside")), shlex.quote(str(root / "secret.txt"))
        assert box.execute(f"mkdir -p {outside} && printf %s {SECRET} > {secret}").exit_code == 0
        yield box


@pytest.fixture
def context(sandbox: DockerSandbox) -> ToolContext:
    restore_checkout(sandbox.workspace)
    return ToolContext(executor=sandbox, test_command="python3 -m pytest -q", command_timeout_s=30, output_chars=2_000)


def call(context: ToolContext, name: str, arguments: dict | str) -> ToolResult:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return default_registry().dispatch(name, raw, context)


def within(seconds: float, action: Callable[[], T]) -> T:
    """`action`'s result, run on a daemon thread so that a call blocking forever fails the test, not the suite."""
    done: list[T] = []
    thread = threading.Thread(target=lambda: done.append(action()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert done, f"still running after {seconds}s"
    return done[0]


def test_schemas_are_the_pydantic_models_and_stable() -> None:
    first = default_registry(symbol_tools=False, ledger=False).schemas()
    assert first == default_registry(symbol_tools=False, ledger=False).schemas()
    names = [schema["function"]["name"] for schema in first]
    assert names == ["bash", "run_tests", "view_file", "str_replace", "create_file", "search", "finish"]
    str_replace = next(s for s in first if s["function"]["name"] == "str_replace")["function"]["parameters"]
    assert str_replace["required"] == ["path", "old", "new"]
    # The tool list is part of every cached prompt: a changed byte re-reads the whole repository on the server.
    digest = hashlib.sha256(json.dumps(first, sort_keys=True).encode()).hexdigest()
    assert digest == "2314a6750631c1607d331e44fd8915c0dfa330785a2933d1d0c42d8081da47d6"


@pytest.mark.docker
def test_view_file_numbers_lines_and_honours_the_range(context: ToolContext) -> None:
    result = call(context, "view_file", {"path": "pkg/geometry.py", "start_line": 2, "end_line": 3})
    assert not result.is_error
    assert result.text.splitlines() == [
        "pkg/geometry.py (lines 2-3 of 3)",
        '2      """Area of a rectangle."""',
        "3      return width * height",
    ]


@pytest.mark.docker
def test_view_file_lists_a_folder_without_git(context: ToolContext, sandbox: DockerSandbox) -> None:
    (sandbox.workspace / "pkg" / "alias").symlink_to("geometry.py")
    assert call(context, "view_file", {"path": "."}).text.splitlines() == [
        "./ (3 entries)",
        "pkg/",
        "pytest.ini",
        "tests/",
    ]
    listing = call(context, "view_file", {"path": "/workspace/pkg"}).text.splitlines()
    assert listing == ["pkg/ (4 entries)", "__init__.py", "alias", "geometry.py", "report.py"]


@pytest.mark.docker
def test_str_replace_requires_exactly_one_occurrence(context: ToolContext, sandbox: DockerSandbox) -> None:
    missing = call(context, "str_replace", {"path": "pkg/report.py", "old": "nope", "new": "x"})
    assert missing.is_error and "occurs 0 times" in missing.text
    twice = call(context, "str_replace", {"path": "pkg/report.py", "old": "compute_area", "new": "area"})
    assert twice.is_error and "occurs 2 times" in twice.text
    once = call(context, "str_replace", {"path": "pkg/geometry.py", "old": "def compute_area", "new": "def area"})
    assert once.text == "replaced 1 occurrence in 'pkg/geometry.py' at line 1"
    assert "def area(width" in (sandbox.workspace / "pkg/geometry.py").read_text()


@pytest.mark.docker
def test_str_replace_keeps_the_rest_of_the_file_byte_for_byte(context: ToolContext, sandbox: DockerSandbox) -> None:
    target = sandbox.workspace / "legacy.txt"
    target.write_bytes(b"caf\xe9 = 1\r\nold = 2\r\n")
    target.chmod(0o755)
    assert not call(context, "str_replace", {"path": "legacy.txt", "old": "old", "new": "new"}).is_error
    assert target.read_bytes() == b"caf\xe9 = 1\r\nnew = 2\r\n"
    assert target.stat().st_mode & 0o777 == 0o755


@pytest.mark.docker
def test_create_file_makes_parents_and_search_finds_untracked_files(context: ToolContext) -> None:
    created = call(context, "create_file", {"path": "pkg/sub/new.py", "content": "VALUE = 1\n"})
    assert created.text == "created 'pkg/sub/new.py' (1 lines)"
    found = call(context, "search", {"pattern": r"VALUE\s*=", "path": "pkg"})
    assert found.text == "pkg/sub/new.py:1: VALUE = 1"
    again = call(context, "create_file", {"path": "/workspace/pkg/sub/new.py", "content": "VALUE = 2\n"})
    assert again.text == "overwrote 'pkg/sub/new.py' (1 lines)"


@pytest.mark.docker
def test_unusual_line_separators_survive_the_round_trip(context: ToolContext, sandbox: DockerSandbox) -> None:
    name = "odd\u2028name\x85.txt"  # JSON leaves both unescaped; str.splitlines() breaks lines at both
    created = call(context, "create_file", {"path": name, "content": "x\n"})
    assert created.text == f"created '{name}' (1 lines)"
    assert (sandbox.workspace / name).read_text() == "x\n"
    assert call(context, "search", {"pattern": "x"}).text == f"{name}:1: x"


@pytest.mark.docker
def test_modules_in_the_workspace_are_not_imported_by_the_file_tools(context: ToolContext) -> None:
    planted = 'import sys\nprint(\'{"text": "hijacked"}\')\nsys.exit()\n'
    assert call(context, "create_file", {"path": "json.py", "content": planted}).text == "created 'json.py' (3 lines)"
    viewed = call(context, "view_file", {"path": "json.py", "start_line": 3})
    assert viewed.text == "json.py (lines 3-3 of 3)\n3  sys.exit()"


@pytest.mark.docker
def test_search_reports_invalid_regex_as_error(context: ToolContext) -> None:
    result = call(context, "search", {"pattern": "("})
    assert result.is_error and "invalid regular expression" in result.text


def _attempts(path: str) -> list[tuple[str, dict]]:
    """The same path through every file tool."""
    return [
        ("view_file", {"path": path}),
        ("str_replace", {"path": path, "old": SECRET, "new": "overwritten"}),
        ("create_file", {"path": path, "content": "planted"}),
        ("search", {"pattern": "classified", "path": path}),
    ]


@pytest.mark.docker
@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../secret.txt", "'..' is not allowed"),
        ("pkg/../../secret.txt", "'..' is not allowed"),
        ("../../etc/passwd", "'..' is not allowed"),
        ("/workspace/../secret.txt", "'..' is not allowed"),
        ("/etc/passwd", "'/etc/passwd' is outside the workspace (/workspace)"),
        (".git/config", "the .git entry is managed by refactor-agent"),
        ("pkg/.git/config", "the .git entry is managed by refactor-agent"),
        (" ", "empty path"),
    ],
)
def test_paths_outside_the_workspace_are_refused(
    context: ToolContext, sandbox: DockerSandbox, path: str, reason: str
) -> None:
    before = sorted(p.name for p in sandbox.workspace.parent.iterdir())
    for name, arguments in _attempts(path):
        result = call(context, name, arguments)
        assert result.is_error and reason in result.text, (name, result.text)
        assert SECRET not in result.text
    assert (sandbox.workspace.parent / "secret.txt").read_text() == SECRET
    assert sorted(p.name for p in sandbox.workspace.parent.iterdir()) == before


@pytest.mark.docker
def test_links_are_never_followed(context: ToolContext, sandbox: DockerSandbox) -> None:
    outside = sandbox.workspace.parent
    (sandbox.workspace / "link.txt").symlink_to(outside / "secret.txt")
    (sandbox.workspace / "linkdir").symlink_to(outside)
    (sandbox.workspace / "passwd").symlink_to("/etc/passwd")
    cases = {
        "link.txt": f"'link.txt' is a symbolic link (to '{outside}/secret.txt')",
        "linkdir/secret.txt": "'linkdir' is a symbolic link",
        "passwd": "'passwd' is a symbolic link (to '/etc/passwd')",
    }
    for path, reason in cases.items():
        for name, arguments in _attempts(path):
            result = call(context, name, arguments)
            assert result.is_error and reason in result.text, (name, path, result.text)
            assert SECRET not in result.text and "root:" not in result.text
    everywhere = call(context, "search", {"pattern": "classified|root:"})
    assert everywhere.text == "no matches for /classified|root:/"
    assert (outside / "secret.txt").read_text() == SECRET
    assert list((outside / "outside").iterdir()) == []


@pytest.mark.docker
def test_sandbox_absolute_paths_map_onto_the_workspace(context: ToolContext) -> None:
    result = call(context, "view_file", {"path": "/workspace/pkg/geometry.py"})
    assert result.text.startswith("pkg/geometry.py (lines 1-3 of 3)")


# Many tries: host-side tools that checked a path before opening it wrote outside in about 1 of 10 (2 busy cores).
RACE_ATTEMPTS = 60
# Swaps `d` (a real folder) and `d.swap` (a link to a folder outside the worktree) atomically, as fast as it can.
FLIPPER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
os.mkdir("d")
os.symlink(sys.argv[1], "d.swap")
while True:
    if libc.renameat2(-100, b"d", -100, b"d.swap", 2) != 0:  # AT_FDCWD, RENAME_EXCHANGE
        sys.exit(os.strerror(ctypes.get_errno()))
"""


@pytest.mark.docker
def test_a_link_swapped_in_during_create_file_is_never_followed(context: ToolContext, sandbox: DockerSandbox) -> None:
    outside = sandbox.workspace.parent / "outside"
    flipper = f"python3 -c {shlex.quote(FLIPPER)} {shlex.quote(str(outside))}"
    start = f"{flipper} >/tmp/flipper.log 2>&1 & echo $! > /tmp/flipper.pid"
    assert call(context, "bash", {"command": start}).text.startswith("[exit code 0")
    try:
        kinds = call(context, "bash", {"command": "sleep 0.5; for i in $(seq 200); do stat -c %F d; done | sort -u"})
        assert "directory" in kinds.text and "symbolic link" in kinds.text, kinds.text  # the race is really on
        results = [
            call(context, "create_file", {"path": f"d/planted-{i}.txt", "content": "planted"})
            for i in range(RACE_ATTEMPTS)
        ]
    finally:
        stopped = call(context, "bash", {"command": "kill $(cat /tmp/flipper.pid); cat /tmp/flipper.log"})
    assert stopped.text.startswith("[exit code 0"), stopped.text  # the flipper was still flipping at the end
    assert list(outside.iterdir()) == []  # on the host
    in_container = call(context, "bash", {"command": f"ls -A {shlex.quote(str(outside))}"})
    assert in_container.text.splitlines()[1:] == []
    refusals = [result.text for result in results if result.is_error]
    for refusal in refusals:
        assert "is a symbolic link" in refusal or "changed while it was opened" in refusal, refusal
    assert refusals  # the link was there for some of the calls


@pytest.mark.docker
def test_a_catastrophic_regex_is_stopped_by_the_timeout(context: ToolContext) -> None:
    context = replace(context, file_tool_timeout_s=5)
    assert not call(context, "create_file", {"path": "slow.txt", "content": "a" * 64 + "b\n"}).is_error
    started = time.monotonic()
    result = within(BOUND_S, lambda: call(context, "search", {"pattern": "(a+)+$", "path": "slow.txt"}))
    assert result.is_error and "search timed out after 5s" in result.text
    assert time.monotonic() - started < BOUND_S
    assert call(context, "bash", {"command": "ps -eo comm= | grep -c python3 || true"}).text.endswith("\n0\n")
    assert not call(context, "view_file", {"path": "slow.txt"}).is_error


@pytest.mark.docker
def test_a_named_pipe_is_refused_without_blocking(context: ToolContext) -> None:
    assert call(context, "bash", {"command": "mkfifo pipe"}).text.startswith("[exit code 0")
    for name, arguments in _attempts("pipe"):
        result = within(BOUND_S, lambda name=name, arguments=arguments: call(context, name, arguments))
        assert result.is_error and "'pipe' is a named pipe" in result.text, (name, result.text)
    found = within(BOUND_S, lambda: call(context, "search", {"pattern": "def compute_area"}))
    assert found.text == "pkg/geometry.py:1: def compute_area(width, height):"


@pytest.mark.docker
def test_a_huge_sparse_file_is_refused_by_its_size(context: ToolContext) -> None:
    assert call(context, "bash", {"command": "truncate -s 3G huge.log"}).text.startswith("[exit code 0")
    viewed = within(BOUND_S, lambda: call(context, "view_file", {"path": "huge.log"}))
    assert viewed.is_error and "'huge.log' is 3221225472 bytes; file tools read at most" in viewed.text
    found = within(BOUND_S, lambda: call(context, "search", {"pattern": "def compute_area"}))
    assert found.text.splitlines() == [
        "pkg/geometry.py:1: def compute_area(width, height):",
        "[1 files over 4194304 bytes not searched: huge.log]",
    ]


@pytest.mark.docker
def test_malformed_calls_become_error_results(context: ToolContext) -> None:
    assert "not valid JSON" in call(context, "bash", '{"command": "ls"').text
    assert "must be a JSON object" in call(context, "bash", "[1, 2]").text
    assert "unknown tool 'rm_rf'" in call(context, "rm_rf", {}).text
    invalid = call(context, "view_file", {"path": "pkg/geometry.py", "start_line": "first"})
    assert invalid.is_error and "start_line" in invalid.text
    assert call(context, "bash", {}).is_error


@pytest.mark.docker
def test_a_failing_file_operation_is_reported_not_raised(context: ToolContext, sandbox: DockerSandbox) -> None:
    # Capabilities are dropped in the sandbox, so the permission bits hold even for a root-owned worktree.
    (sandbox.workspace / "pkg").chmod(0o500)
    try:
        result = call(context, "create_file", {"path": "pkg/blocked/x.py", "content": ""})
    finally:
        (sandbox.workspace / "pkg").chmod(0o755)
    assert result.is_error and result.text.startswith("error: create_file failed: PermissionError")


@pytest.mark.docker
def test_bash_and_run_tests_report_exit_codes(context: ToolContext) -> None:
    assert call(context, "bash", {"command": "exit 3"}).text.startswith("[exit code 3")
    tests = call(context, "run_tests", {})
    assert "exit code 0" in tests.text and "2 passed" in tests.text


@pytest.mark.docker
def test_command_timeout_is_reported(context: ToolContext) -> None:
    result = call(context, "bash", {"command": "sleep 5; echo late", "timeout": 1})
    assert result.text.startswith("[timed out after 1s: the command was killed")
    assert "late" not in result.text


@pytest.mark.docker
def test_long_output_keeps_head_and_tail(context: ToolContext) -> None:
    result = call(context, "bash", {"command": "seq 1 20000"})
    assert result.text.count("\n") < 1_000
    assert "characters cut" in result.text
    assert result.text.rstrip().endswith("20000")


@pytest.mark.docker
def test_finish_raises_and_rejects_empty_summaries(context: ToolContext) -> None:
    assert call(context, "finish", {"summary": "  "}).is_error
    with pytest.raises(FinishRequested) as finished:
        call(context, "finish", {"summary": "Renamed it"})
    assert finished.value.summary == "Renamed it"


def test_cap_text_is_exact_about_what_it_cut() -> None:
    text = "a" * 500 + "b" * 500
    capped = cap_text(text, 200)
    note = "\n[... 855 characters cut from the middle of 1000 ...]\n"
    assert capped == "a" * 58 + note + "b" * 87 and len(capped) <= 200
    assert cap_text("short", 20) == "short"


def test_detect_test_command(tmp_path: Path) -> None:
    assert detect_test_command(tmp_path) is None
    (tmp_path / "Makefile").write_text("build:\n\ttrue\ntest:\n\ttrue\n")
    assert _command(tmp_path) == "make test"
    (tmp_path / "go.mod").write_text("module x\n")
    assert _command(tmp_path) == "go test ./..."
    (tmp_path / "package.json").write_text('{"scripts": {"test": "jest"}}')
    assert _command(tmp_path) == "npm test"
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("")
    assert _command(tmp_path) == "python3 -m pytest -q"


def _command(root: Path) -> str | None:
    found = detect_test_command(root)
    return found.command if found is not None else None


def test_detect_test_command_follows_no_link_and_blocks_on_no_pipe(tmp_path: Path) -> None:
    repo, elsewhere = tmp_path / "repo", tmp_path / "elsewhere"
    repo.mkdir()
    elsewhere.mkdir()
    (elsewhere / "test_outside.py").write_text("")
    (elsewhere / "package.json").write_text('{"scripts": {"test": "jest"}}')
    (elsewhere / "tox.ini").write_text("[testenv]\ncommands = pytest\n")
    (elsewhere / "workflows").mkdir()
    (elsewhere / "workflows" / "ci.yml").write_text("jobs:\n  test:\n    steps:\n      - run: pytest\n")
    os.mkfifo(elsewhere / "pipe")
    (repo / "tests").symlink_to(elsewhere)  # test files outside the repository are not its tests
    (repo / "package.json").symlink_to(elsewhere / "package.json")
    (repo / "tox.ini").symlink_to(elsewhere / "tox.ini")
    (repo / ".github").mkdir()
    (repo / ".github" / "workflows").symlink_to(elsewhere / "workflows")
    (repo / "pyproject.toml").symlink_to(elsewhere / "pipe")  # reading it would wait for a writer forever
    (repo / "noxfile.py").symlink_to(elsewhere / "pipe")
    assert within(BOUND_S, lambda: detect_test_command(repo)) is None
    (repo / "Makefile").symlink_to("/dev/zero")
    assert within(BOUND_S, lambda: detect_test_command(repo)) is None
