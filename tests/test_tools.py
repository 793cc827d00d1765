"""Tools as the model calls them: through the registry, with JSON arguments, against a real git worktree."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tools import FinishRequested, ToolContext, default_registry
from tools.output import cap_text
from tools.paths import PathOutsideWorkspace, resolve_in_workspace
from tools.test_command import detect_test_command

from local_executor import LocalExecutor
from repos import make_repo


@pytest.fixture
def context(tmp_path: Path) -> ToolContext:
    repo = make_repo(tmp_path / "repo")
    return ToolContext(
        workspace=repo,
        executor=LocalExecutor(repo),
        test_command="python3 -m pytest -q",
        command_timeout_s=30,
        output_chars=2_000,
    )


def call(context: ToolContext, name: str, arguments: dict | str):
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return default_registry().dispatch(name, raw, context)


def test_schemas_are_the_pydantic_models_and_stable() -> None:
    first, second = default_registry().schemas(), default_registry().schemas()
    assert first == second
    names = [schema["function"]["name"] for schema in first]
    assert names == ["bash", "run_tests", "view_file", "str_replace", "create_file", "search", "finish"]
    str_replace = next(s for s in first if s["function"]["name"] == "str_replace")["function"]["parameters"]
    assert str_replace["required"] == ["path", "old", "new"]


def test_view_file_numbers_lines_and_honours_the_range(context: ToolContext) -> None:
    result = call(context, "view_file", {"path": "pkg/geometry.py", "start_line": 2, "end_line": 3})
    assert not result.is_error
    assert "lines 2-3 of 3" in result.text
    assert "2  " in result.text and "def compute_area" not in result.text


def test_str_replace_requires_exactly_one_occurrence(context: ToolContext) -> None:
    missing = call(context, "str_replace", {"path": "pkg/report.py", "old": "nope", "new": "x"})
    assert missing.is_error and "occurs 0 times" in missing.text
    twice = call(context, "str_replace", {"path": "pkg/report.py", "old": "compute_area", "new": "area"})
    assert twice.is_error and "occurs 2 times" in twice.text
    once = call(context, "str_replace", {"path": "pkg/geometry.py", "old": "def compute_area", "new": "def area"})
    assert not once.is_error
    assert "def area(width" in (context.workspace / "pkg/geometry.py").read_text()


def test_create_file_makes_parents_and_search_finds_untracked_files(context: ToolContext) -> None:
    assert not call(context, "create_file", {"path": "pkg/sub/new.py", "content": "VALUE = 1\n"}).is_error
    found = call(context, "search", {"pattern": r"VALUE\s*=", "path": "pkg"})
    assert found.text == "pkg/sub/new.py:1: VALUE = 1"


def test_search_reports_invalid_regex_as_error(context: ToolContext) -> None:
    result = call(context, "search", {"pattern": "("})
    assert result.is_error and "invalid regular expression" in result.text


@pytest.mark.parametrize(
    "path",
    ["../outside.txt", "pkg/../../outside.txt", "/etc/passwd", "../../etc/passwd", ".git/config", ""],
)
def test_paths_outside_the_workspace_are_refused(context: ToolContext, path: str) -> None:
    for name, arguments in (
        ("view_file", {"path": path}),
        ("create_file", {"path": path, "content": "x"}),
    ):
        result = call(context, name, arguments)
        assert result.is_error, (name, path)
    assert not (context.workspace.parent / "outside.txt").exists()


def test_symlink_escape_is_refused(context: ToolContext, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    os.symlink(secret, context.workspace / "link.txt")
    os.symlink(tmp_path, context.workspace / "linkdir")
    assert call(context, "view_file", {"path": "link.txt"}).is_error
    assert call(context, "create_file", {"path": "linkdir/planted.txt", "content": "x"}).is_error
    assert not (tmp_path / "planted.txt").exists()


def test_sandbox_absolute_paths_map_onto_the_workspace(context: ToolContext) -> None:
    resolved = resolve_in_workspace(context.workspace, "/workspace/pkg/geometry.py")
    assert resolved == (context.workspace / "pkg/geometry.py").resolve()
    with pytest.raises(PathOutsideWorkspace):
        resolve_in_workspace(context.workspace, "/workspace/../etc/passwd")


def test_malformed_calls_become_error_results(context: ToolContext) -> None:
    assert "not valid JSON" in call(context, "bash", '{"command": "ls"').text
    assert "must be a JSON object" in call(context, "bash", "[1, 2]").text
    assert "unknown tool 'rm_rf'" in call(context, "rm_rf", {}).text
    invalid = call(context, "view_file", {"path": "pkg/geometry.py", "start_line": "first"})
    assert invalid.is_error and "start_line" in invalid.text
    assert call(context, "bash", {}).is_error


def test_a_crashing_tool_is_reported_not_raised(context: ToolContext) -> None:
    (context.workspace / "pkg").chmod(0o500)
    try:
        result = call(context, "create_file", {"path": "pkg/blocked/x.py", "content": ""})
    finally:
        (context.workspace / "pkg").chmod(0o755)
    if os.geteuid() == 0:  # root ignores permission bits; make the failure another way
        (context.workspace / "afile").write_text("")
        result = call(context, "create_file", {"path": "afile/child.py", "content": ""})
    assert result.is_error and "failed" in result.text


def test_bash_and_run_tests_report_exit_codes(context: ToolContext) -> None:
    assert call(context, "bash", {"command": "exit 3"}).text.startswith("[exit code 3")
    tests = call(context, "run_tests", {})
    assert "exit code 0" in tests.text and "2 passed" in tests.text


def test_command_timeout_is_reported(context: ToolContext) -> None:
    result = call(context, "bash", {"command": "sleep 5", "timeout": 1})
    assert "timed out after 1s" in result.text


def test_long_output_keeps_head_and_tail(context: ToolContext) -> None:
    result = call(context, "bash", {"command": "seq 1 20000"})
    assert result.text.count("\n") < 1_000
    assert "characters cut" in result.text
    assert result.text.rstrip().endswith("20000")


def test_finish_raises_and_rejects_empty_summaries(context: ToolContext) -> None:
    assert call(context, "finish", {"summary": "  "}).is_error
    with pytest.raises(FinishRequested) as finished:
        call(context, "finish", {"summary": "Renamed it"})
    assert finished.value.summary == "Renamed it"


def test_cap_text_is_exact_about_what_it_cut() -> None:
    text = "a" * 50 + "b" * 50
    capped = cap_text(text, 20)
    assert capped.startswith("a" * 8) and capped.endswith("b" * 12)
    assert "80 characters cut" in capped
    assert cap_text("short", 20) == "short"


def test_detect_test_command(tmp_path: Path) -> None:
    assert detect_test_command(tmp_path) is None
    (tmp_path / "Makefile").write_text("build:\n\ttrue\ntest:\n\ttrue\n")
    assert detect_test_command(tmp_path) == "make test"
    (tmp_path / "go.mod").write_text("module x\n")
    assert detect_test_command(tmp_path) == "go test ./..."
    (tmp_path / "package.json").write_text('{"scripts": {"test": "jest"}}')
    assert detect_test_command(tmp_path) == "npm test"
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("")
    assert detect_test_command(tmp_path) == "python3 -m pytest -q"
