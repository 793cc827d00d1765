"""`refactor-agent eval`: the suite format read as data, the score, bad input, and the shipped suite's oracle
(100%) and no-op (0%) runs through the real runner, tools and sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.eval.score import EvalReport, TaskResult, compare, wilson_interval
from agent.eval.suite import SuiteError, load_suite

SUITE = Path(__file__).resolve().parents[2] / "bench" / "refactor-suite"
DEAD_SERVER = "http://127.0.0.1:9/v1"  # never reached: bad input is refused first, scripted models need none
TINY_MAPPING = (
    "file_mapping = {'../tests/tiny_refactor/test_rename.py': "
    "'../problems/base_problems/tiny_refactor/rename-task.txt'}\n"
)


def make_suite(root: Path, test_source: str, mapping: str | None = None) -> Path:
    """A one-task suite in RefactorBench's layout."""
    (root / "repositories" / "tiny_refactor").mkdir(parents=True)
    (root / "repositories" / "tiny_refactor" / "tiny.py").write_text("def old_name():\n    return 1\n")
    (root / "problems" / "base_problems" / "tiny_refactor").mkdir(parents=True)
    (root / "problems" / "base_problems" / "tiny_refactor" / "rename-task.txt").write_text(
        "Rename old_name to new_name.\n"
    )
    (root / "tests" / "tiny_refactor").mkdir(parents=True)
    (root / "tests" / "tiny_refactor" / "test_rename.py").write_text(test_source)
    (root / "scripts").mkdir()
    (root / "scripts" / "base_mapping.py").write_text(mapping if mapping is not None else TINY_MAPPING)
    return root


def eval_cli(*arguments: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["eval", *arguments])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("variant", ["base", "descriptive", "lazy"])
def test_the_shipped_suite_has_12_tasks_on_3_repositories_each_with_test_and_reference(variant: str) -> None:
    tasks = load_suite(SUITE, variant, [])  # type: ignore[arg-type]
    assert len(tasks) >= 12 and len({task.repository for task in tasks}) >= 3
    assert all(task.prompt and task.test.is_file() and task.reference is not None for task in tasks)
    assert len({task.test for task in tasks}) == len(tasks), "one test file per task"


def test_only_picks_tasks_by_repository_and_problem_name_and_refuses_unknown_ones() -> None:
    chosen = load_suite(SUITE, "base", ["geo_refactor/rename-haversine-task", "textkit_refactor/rename-textstats-task"])
    assert [task.id for task in chosen] == [
        "geo_refactor/rename-haversine-task",
        "textkit_refactor/rename-textstats-task",
    ]
    assert chosen[0].test.name == "test_great_circle_rename.py", "tests are mapped by the mapping, not by name"
    with pytest.raises(SuiteError, match="--only geo_refactor/nope: no such task"):
        load_suite(SUITE, "base", ["geo_refactor/nope"])


def test_the_mapping_is_read_as_data_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    mapping = f"open({str(marker)!r}, 'w').close()\n{TINY_MAPPING}"
    (task,) = load_suite(make_suite(tmp_path / "suite", "", mapping), "base", [])
    assert task.id == "tiny_refactor/rename-task" and task.reference is None
    assert not marker.exists()


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ("file_mapping = build()\n", "no `file_mapping = {"),
        (
            "file_mapping = {'../../outside.py': '../problems/base_problems/tiny_refactor/rename-task.txt'}\n",
            "is not a file inside the suite",
        ),
        ("file_mapping = {\n", "cannot read it as Python source"),
    ],
)
def test_a_bad_mapping_is_one_clear_error(tmp_path: Path, mapping: str, message: str) -> None:
    (tmp_path / "outside.py").write_text("")
    with pytest.raises(SuiteError, match=message.replace("(", r"\(").replace("{", r"\{")):
        load_suite(make_suite(tmp_path / "suite", "", mapping), "base", [])


def test_wilson_interval_stays_in_range_and_is_honest_about_few_tasks() -> None:
    low, high = wilson_interval(12, 12)
    assert high == 1.0 and 0.75 < low < 0.76
    low, high = wilson_interval(0, 12)
    assert low == 0.0 and 0.24 < high < 0.25
    low, high = wilson_interval(5, 10)
    assert round(low, 3) == 0.237 and round(high, 3) == 0.763
    assert wilson_interval(0, 0) == (None, None)


def test_totals_leave_invalid_tasks_out_and_compare_names_changed_outcomes() -> None:
    def report(eval_id: str, outcomes: list[str]) -> EvalReport:
        results = [TaskResult(id=f"r/t{n}", outcome=outcome) for n, outcome in enumerate(outcomes)]  # type: ignore[arg-type]
        return EvalReport(
            eval_id=eval_id, suite="s", variant="base", model="m", ledger=True, symbol_tools=True, results=results
        )

    before = report("before", ["unsolved", "solved", "invalid", "error"])
    after = report("after", ["solved", "solved", "invalid", "unsolved"])
    totals = after.totals
    assert (totals.tasks, totals.scored, totals.solved, totals.solve_rate) == (4, 3, 2, 2 / 3)
    assert json.loads(after.model_dump_json())["totals"]["solved"] == 2, "eval.json carries the totals"
    lines = compare(after, before)
    assert lines[:2] == ["r/t0: unsolved -> solved", "r/t3: error -> unsolved"]
    assert lines[-1].startswith("after: 2/3 solved (67%, 95% CI 21%-94%)")


@pytest.mark.parametrize(
    ("arguments", "line"),
    [
        (["--oracle", "--noop"], "error: --oracle and --noop: choose one"),
        (["--only", "geo_refactor/nope"], "error: --only geo_refactor/nope: no such task in --variant base"),
        (["--max-turns", "0"], "error: --max-turns 0: input should be greater than or equal to 1"),
        (["--ledger", "maybe"], "error: --ledger: 'maybe' is not one of on, off"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, arguments: list[str], line: str) -> None:
    code, stdout, stderr = eval_cli(
        str(SUITE), "--server", DEAD_SERVER, "--runs-dir", str(tmp_path / "runs"), *arguments
    )
    assert code == 2 and line in stderr and stdout == ""
    assert not (tmp_path / "runs").exists(), "nothing is created for refused input"


def test_a_folder_that_is_not_a_suite_and_a_bad_compare_file_are_refused(tmp_path: Path) -> None:
    code, _, stderr = eval_cli(str(tmp_path), "--runs-dir", str(tmp_path / "runs"))
    assert (
        code == 2
        and stderr == f"error: {tmp_path} is not a suite in RefactorBench's layout: it has no repositories/ folder\n"
    )
    (tmp_path / "other.json").write_text("{}")
    code, _, stderr = eval_cli(
        str(SUITE), "--compare", str(tmp_path / "other.json"), "--runs-dir", str(tmp_path / "runs")
    )
    assert (
        code == 2
        and stderr == f"error: --compare {tmp_path / 'other.json'}: not an eval.json written by refactor-agent eval\n"
    )


def _eval(tmp_path: Path, suite: Path, *options: str) -> tuple[EvalReport, Path]:
    code, stdout, stderr = eval_cli(str(suite), "--runs-dir", str(tmp_path / "runs"), *options)
    assert code == 0, stdout + stderr
    (directory,) = (tmp_path / "runs").iterdir()
    return EvalReport.model_validate_json((directory / "eval.json").read_bytes()), directory


@pytest.mark.docker
def test_the_oracle_solves_every_shipped_task_through_the_tools(tmp_path: Path) -> None:
    report, directory = _eval(tmp_path, SUITE, "--oracle")
    assert [result.outcome for result in report.results] == ["solved"] * len(load_suite(SUITE, "base", []))
    assert report.totals.solve_rate == 1.0 and all(result.untouched_exit == 1 for result in report.results)
    assert "| geo_refactor/rename-haversine-task | solved |" in (directory / "report.md").read_text()
    transcripts = [path.read_text() for path in (directory / "runs").glob("*/transcript.jsonl")]
    assert len(transcripts) == len(report.results)
    # The suite's tests are never in the agent's worktree nor its context; the ledger ran in each task's sandbox.
    assert not any("Static checks with ast" in text or "unittest" in text for text in transcripts)
    assert all("[ledger] files changed so far" in text for text in transcripts)


@pytest.mark.docker
def test_a_model_that_finishes_without_edits_solves_nothing(tmp_path: Path) -> None:
    report, _ = _eval(tmp_path, SUITE, "--noop")
    assert {result.outcome for result in report.results} == {"unsolved"}
    assert report.totals.solved == 0 and report.totals.invalid == 0


@pytest.mark.docker
def test_a_test_that_passes_untouched_is_invalid_and_runs_in_the_sandbox_not_on_the_host(tmp_path: Path) -> None:
    marker = tmp_path / "test-ran-on-the-host"
    suite = make_suite(tmp_path / "suite", f"open({str(marker)!r}, 'w').close()\n")
    report, _ = _eval(tmp_path, suite, "--noop")
    (result,) = report.results
    assert (result.outcome, result.untouched_exit) == ("invalid", 0)
    assert not marker.exists()
