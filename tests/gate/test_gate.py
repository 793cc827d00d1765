"""The verification gate: real runners' reports, comparisons, the parse check, the suite in the sandbox."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agent.gate.baseline import BaselineCache, baseline_key
from agent.gate.compare import compare, function_of, settle_flaky
from agent.gate.results import (
    WHOLE_SUITE,
    RunnerReport,
    SuiteRun,
    count,
    parse_counts,
    parse_go_json,
    parse_junit,
)
from agent.gate.suite import rerun_selected, run_suite
from agent.gate.syntax import syntax_regressions
from agent.gate.test_command import detect_test_command
from agent.gate.unittest_output import parse_unittest
from agent.gate.verdict import evidence_trailer, judge, repair_message
from sandbox import DockerSandbox

from support.local_sandbox import LocalExecutor, sandbox_environment
from support.repos import SAMPLE_FILES, make_repo

MIXED_TESTS = """
import pytest

def test_passes():
    assert True

def test_fails():
    assert 1 == 2, "one is not two"

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

def test_errors(broken):
    pass

@pytest.mark.skip(reason="not today")
def test_skipped():
    pass

class TestGroup:
    @pytest.mark.parametrize("value", [1, 2])
    def test_param(self, value):
        assert value
"""


def _suite(outcomes: dict, ran: bool = True) -> SuiteRun:
    return SuiteRun(command="pytest", ran=ran, outcomes=outcomes, counts=count(outcomes), per_test=True)


def _sandbox(tmp_path: Path) -> tuple[Path, LocalExecutor]:
    """A folder for a suite, and a local sandbox working in it: real pytest as the gate runs it (the image's, with
    no plugins of this environment), forked from the session's pytest zygote."""
    (tmp_path / "home").mkdir()
    (tmp_path / "repo" / "tests").mkdir(parents=True)
    return tmp_path / "repo", LocalExecutor(tmp_path / "repo", sandbox_environment(tmp_path / "home"))


# As the gate runs it: no user site-packages.
PYTEST = "PYTHONNOUSERSITE=1 python3 -m pytest -p no:cacheprovider -o junit_family=xunit1"


def test_junit_from_real_pytest_names_tests_by_their_node_ids(tmp_path: Path) -> None:
    root, sandbox = _sandbox(tmp_path)
    (root / "tests" / "test_mixed.py").write_text(MIXED_TESTS)
    (root / "tests" / "test_unimportable.py").write_text("import not_installed_here\n\ndef test_x():\n    pass\n")
    report = tmp_path / "junit.xml"
    run = sandbox.execute(f"{PYTEST} --junitxml={report} --continue-on-collection-errors tests")
    collected = sandbox.execute(f"{PYTEST} --collect-only -q tests 2>/dev/null").output
    assert run.exit_code == 1, run.output
    node_ids = {line for line in collected.splitlines() if "::" in line}
    parsed = parse_junit(report.read_bytes())
    assert parsed is not None
    outcomes, details = parsed.outcomes, parsed.details
    assert set(outcomes) == node_ids
    assert parsed.import_errors == {
        "tests/test_unimportable.py": "ModuleNotFoundError: No module named 'not_installed_here'"
    }
    assert outcomes == {
        "tests/test_mixed.py::test_passes": "passed",
        "tests/test_mixed.py::test_fails": "failed",
        "tests/test_mixed.py::test_errors": "error",
        "tests/test_mixed.py::test_skipped": "skipped",
        "tests/test_mixed.py::TestGroup::test_param[1]": "passed",
        "tests/test_mixed.py::TestGroup::test_param[2]": "passed",
    }
    assert "one is not two" in details["tests/test_mixed.py::test_fails"]
    assert "fixture broke" in details["tests/test_mixed.py::test_errors"]


def test_hostile_or_broken_reports_are_not_parsed() -> None:
    bomb = (
        b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>'
        b'<testsuite><testcase classname="m" name="&b;"/></testsuite>'
    )
    assert parse_junit(bomb) is None
    assert parse_junit(b"<testsuite><testcase name='cut") is None


def test_runner_summaries_are_counted() -> None:
    assert parse_counts("....\n===== 412 passed, 3 failed, 2 skipped in 9.1s =====\n") == {
        "passed": 412,
        "failed": 3,
        "skipped": 2,
    }
    assert parse_counts("1 error in 0.2s") == {"error": 1}
    cargo = "test result: ok. 7 passed; 0 failed; 1 ignored\n\ntest result: FAILED. 2 passed; 1 failed; 0 ignored\n"
    assert parse_counts(cargo) == {"passed": 9, "failed": 1, "skipped": 1}
    assert parse_counts("Tests:       1 failed, 2 skipped, 10 passed, 13 total\n") == {
        "failed": 1,
        "skipped": 2,
        "passed": 10,
    }
    assert parse_counts("make: *** [test] Error 2\n") == {}


UNITTEST_CASES = """
import unittest


class T(unittest.TestCase):
    def test_ok(self):
        pass

    def test_documented(self):
        \"\"\"Its docstring is printed on the line of its result.\"\"\"

    def test_fails(self):
        self.assertEqual(1, 2)

    def test_errors(self):
        raise RuntimeError("boom")

    @unittest.skip("not today")
    def test_skipped(self):
        pass

    @unittest.expectedFailure
    def test_known_bug(self):
        self.assertEqual(1, 2)

    def test_subtests(self):
        for number in range(3):
            with self.subTest(number=number):
                self.assertLess(number, 2)
"""


def test_unittest_verbose_output_gives_per_test_outcomes(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_cases.py").write_text(UNITTEST_CASES)
    (tmp_path / "tests" / "test_unimportable.py").write_text("import not_installed_here\n")
    done = subprocess.run(
        [sys.executable, "-m", "unittest", "discover", "-s", "tests", "-v"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    report = parse_unittest(done.stdout + done.stderr)
    assert report is not None
    assert report.outcomes == {
        "test_cases.T.test_ok": "passed",
        "test_cases.T.test_documented": "passed",
        "test_cases.T.test_fails": "failed",
        "test_cases.T.test_errors": "error",
        "test_cases.T.test_skipped": "skipped",
        "test_cases.T.test_known_bug": "skipped",
        "test_cases.T.test_subtests": "failed",
    }
    assert report.import_errors == {"test_unimportable": "ModuleNotFoundError: No module named 'not_installed_here'"}
    assert report.details["test_cases.T.test_fails"].endswith("AssertionError: 1 != 2")
    assert "2 not less than 2" in report.details["test_cases.T.test_subtests"]
    assert parse_counts(done.stderr) == {"passed": 2, "failed": 2, "error": 2, "skipped": 2}
    # Python before 3.11 names the class only; a test's own print may push its result to a line of its own.
    older = "test_a (pkg.tests.T) ... ok\ntest_b (pkg.tests.T) ... printed by the test\nFAIL\n"
    assert parse_unittest(older) == RunnerReport(
        outcomes={"pkg.tests.T.test_a": "passed", "pkg.tests.T.test_b": "failed"}
    )
    assert parse_unittest("Creating test database for alias 'default'...\nRan 0 tests\n") is None


def test_go_test_json_events_give_per_test_outcomes() -> None:
    events = "\n".join(
        [
            '{"Action":"run","Package":"ex/a","Test":"TestOne"}',
            '{"Action":"pass","Package":"ex/a","Test":"TestOne"}',
            '{"Action":"fail","Package":"ex/a","Test":"TestTwo"}',
            '{"Action":"pass","Package":"ex/a"}',
            "# ex/b [build failed]",
            '{"Action":"fail","Package":"ex/b"}',
        ]
    )
    assert parse_go_json(events) == {"ex/a::TestOne": "passed", "ex/a::TestTwo": "failed", "ex/b": "error"}


def test_regressions_are_tests_that_passed_before_and_not_now() -> None:
    baseline = _suite({"a": "passed", "b": "passed", "c": "failed", "d": "failed", "e": "passed", "f": "skipped"})
    after = _suite({"a": "passed", "b": "failed", "c": "failed", "d": "passed", "f": "failed", "new": "error"})
    comparison = compare(baseline, after)
    assert comparison.regressed == ["b", "e", "new"]
    assert comparison.removed == ["e"]
    assert comparison.fixed == ["d"]
    assert comparison.still_failing == ["c"]
    flaky = settle_flaky(comparison, _suite({"b": "passed", "new": "error"}))
    assert flaky.regressed == ["e", "new"] and flaky.flaky == ["b"]


# Parametrize ids that differ every run of the same tree: the time, a random number.
RUN_DEPENDENT_IDS = """
import datetime
import random

import pytest


@pytest.mark.parametrize("when", [datetime.datetime.now().strftime("%d-%m-%Y %H:%M:%S.%f")])
def test_at(when):
    assert when


@pytest.mark.parametrize("value", [random.random(), random.random()])
def test_random(value):
    assert value < 1


def test_stable():
    assert True
"""


def _junit_run(sandbox: LocalExecutor, report: Path) -> SuiteRun:
    sandbox.execute(f"{PYTEST} --junitxml={report} tests")
    parsed = parse_junit(report.read_bytes())
    assert parsed is not None
    return _suite(parsed.outcomes)


def test_ids_that_change_between_runs_of_the_same_tree_are_not_regressions(tmp_path: Path) -> None:
    root, sandbox = _sandbox(tmp_path)
    (root / "tests" / "test_ids.py").write_text(RUN_DEPENDENT_IDS)
    baseline, after = _junit_run(sandbox, tmp_path / "baseline.xml"), _junit_run(sandbox, tmp_path / "after.xml")
    assert set(baseline.outcomes) != set(after.outcomes), "the set-up: the ids differ between the two runs"
    assert baseline.counts == after.counts == {"passed": 4}
    comparison = compare(baseline, after)
    assert comparison.regressed == [] and comparison.removed == []
    assert len(comparison.renamed) == 3
    assert {function_of(old) for old in comparison.renamed} == {
        "tests/test_ids.py::test_at",
        "tests/test_ids.py::test_random",
    }


def test_renamed_ids_are_matched_by_count_and_what_stays_unmatched_counts() -> None:
    baseline = _suite({"t::a[1]": "passed", "t::a[2]": "passed", "t::b[x]": "passed", "t::c[old]": "failed"})
    after = _suite({"t::a[3]": "passed", "t::b[y]": "failed", "t::c[new]": "passed", "t::d[z]": "failed"})
    comparison = compare(baseline, after)
    # a: two gone, one new: one pair, one gone. b: matched, and it fails now. c: matched, and it passes now.
    assert comparison.renamed == {"t::a[1]": "t::a[3]", "t::b[x]": "t::b[y]", "t::c[old]": "t::c[new]"}
    assert comparison.regressed == ["t::a[2]", "t::b[y]", "t::d[z]"]
    assert comparison.removed == ["t::a[2]"] and comparison.fixed == ["t::c[old]"]


def test_verdicts_trailer_and_repair_message() -> None:
    baseline = _suite({"t::ok": "passed", "t::old": "failed"})
    after = _suite({"t::ok": "failed", "t::old": "failed"}).model_copy(update={"details": {"t::ok": "assert 1 == 2"}})
    check = judge(baseline, after, compare(baseline, after), [])
    assert check.verdict == "regressed" and check.reason == "1 test regressed"
    message = repair_message(check)
    assert "- t::ok" in message and "assert 1 == 2" in message and "t::old" not in message
    assert evidence_trailer(baseline, after) == "2 failed (baseline 1 passed, 1 failed)"
    assert judge(baseline, baseline, compare(baseline, baseline), []).verdict == "verified"
    assert judge(None, None, None, []).verdict == "unverified"
    not_run = SuiteRun(command="pytest", ran=False, reason="timed out after 600s")
    unverified = judge(not_run, None, None, [])
    assert unverified.verdict == "unverified" and "timed out after 600s" in unverified.reason
    assert judge(not_run, None, None, ["a.py:3: does not parse as python any more"]).verdict == "regressed"


def test_a_suite_that_does_not_run_after_the_change_says_so_instead_of_naming_every_test_regressed() -> None:
    """Corpus run 5: packaging's unchanged tree was "regressed (62435 test(s) regressed)" when its check timed out
    on a loaded machine: not one test had failed. The verdict stays (the change may be what hangs); the reason is
    what happened."""
    baseline = _suite({"t::a": "passed", "t::b": "passed", "t::c": "failed"})
    timed_out = SuiteRun(command="pytest", ran=False, reason="timed out after 600s")
    check = judge(baseline, timed_out, compare(baseline, timed_out), [])
    assert check.verdict == "regressed"
    assert (
        check.reason
        == "the suite did not run after the change (timed out after 600s): 2 tests that passed had no result"
    )


def test_a_file_that_stops_parsing_is_caught_one_broken_before_is_not() -> None:
    files = {
        "good.py": (b"def f():\n    return 1\n", b"def f(:\n    return 1\n"),
        "was_broken.py": (b"def f(:\n", b"def g(:\n"),
        "new.py": (None, b"class\n"),
        "notes.txt": (b"x", b"(("),
        "deleted.py": (b"x = 1\n", None),
        "fine.go": (b"package a\n", b"package a\n\nfunc F() {}\n"),
    }
    asked = []

    def read(wanted):
        for path, when in wanted:
            asked.append((path, when))
            yield (path, when), files[path][0 if when == "before" else 1]

    broken = syntax_regressions(list(files), read)
    assert broken == [
        "good.py:1: does not parse as python any more",
        "new.py:1: does not parse as python any more",
    ]
    # The base version only of what does not parse now; nothing of a language the packer does not know.
    assert sorted(asked) == sorted(
        [(path, "after") for path in files if path != "notes.txt"]
        + [("good.py", "before"), ("was_broken.py", "before"), ("new.py", "before")]
    )


def test_baselines_are_cached_per_commit_command_and_image(tmp_path: Path) -> None:
    cache = BaselineCache(tmp_path)
    key = baseline_key("c0ffee", "pytest -q", "sha256:1")
    assert cache.get(key) is None
    cache.put(key, _suite({"a": "passed"}))
    assert cache.get(key) == _suite({"a": "passed"})
    assert cache.get(baseline_key("c0ffee", "pytest", "sha256:1")) is None
    (tmp_path / ".baselines" / f"{key}.json").write_text("{not json")
    assert cache.get(key) is None


def test_tasks_in_parallel_may_store_the_same_baseline_at_once(tmp_path: Path) -> None:
    cache = BaselineCache(tmp_path)
    key = baseline_key("c0ffee", "pytest -q", "sha256:1")
    suite = _suite({f"test_{n}": "passed" for n in range(200)})
    with ThreadPoolExecutor(max_workers=4) as threads:
        for stored in [threads.submit(cache.put, key, suite) for _ in range(400)]:
            stored.result()  # each one ends, none finds its file gone
    assert cache.get(key) == suite
    assert [path.name for path in (tmp_path / ".baselines").iterdir()] == [f"{key}.json"]


@pytest.fixture
def sandboxed_repo(tmp_path: Path) -> Iterator[tuple[Path, DockerSandbox]]:
    repo = make_repo(tmp_path / "repo")
    with DockerSandbox("refactor-agent-sandbox:latest", repo, run_id="test-gate") as sandbox:
        yield repo, sandbox


@pytest.mark.docker
def test_the_suite_runs_in_the_sandbox_and_a_broken_test_is_a_regression(
    sandboxed_repo: tuple[Path, DockerSandbox],
) -> None:
    repo, sandbox = sandboxed_repo
    command = "python3 -m pytest -q"
    baseline = run_suite(sandbox, command, timeout_s=120)
    assert baseline.ran and baseline.per_test
    assert baseline.outcomes == {
        "tests/test_geometry.py::test_area": "passed",
        "tests/test_geometry.py::test_describe": "passed",
    }
    assert not list(repo.rglob("junit.xml")), "the report stays in the sandbox's /tmp"
    geometry = repo / "pkg" / "geometry.py"
    geometry.write_text(geometry.read_text().replace("width * height", "width + height"))
    after = run_suite(sandbox, command, timeout_s=120)
    comparison = compare(baseline, after)
    assert comparison.regressed == ["tests/test_geometry.py::test_area", "tests/test_geometry.py::test_describe"]
    assert "assert 5 == 6" in after.details["tests/test_geometry.py::test_area"]
    rerun = rerun_selected(sandbox, command, comparison.regressed, timeout_s=120)
    assert rerun is not None and set(rerun.outcomes) == set(comparison.regressed)
    assert settle_flaky(comparison, rerun).regressed == comparison.regressed


# A test that runs the project in a subprocess (typer's docs tests: `python -m coverage run docs_src/...` per test):
# the child finds what the first one compiled, rich and click included, or each one compiles them all again.
SUBPROCESS_TEST = """import importlib.util, json, subprocess, sys

import pkg.geometry


def test_a_child_reuses_what_was_compiled():
    subprocess.run([sys.executable, "-c", "import pkg.geometry, json"], check=True)
    for module in (pkg.geometry, json):
        cached = importlib.util.cache_from_source(module.__file__)
        assert cached.startswith(sys.pycache_prefix) and open(cached, "rb").read(4) == importlib.util.MAGIC_NUMBER
"""


@pytest.mark.docker
def test_the_suite_compiles_each_module_once_into_its_own_cache_never_into_the_worktree(
    sandboxed_repo: tuple[Path, DockerSandbox],
) -> None:
    """Issue 19 (typer): the sandbox's PYTHONDONTWRITEBYTECODE made every Python process of a suite compile every
    module it imports from source: typer's 1,400 tests each start one, 4 s apiece instead of 0.7 s."""
    repo, sandbox = sandboxed_repo
    (repo / "tests" / "test_children.py").write_text(SUBPROCESS_TEST)
    run = run_suite(sandbox, "python3 -m pytest -q", timeout_s=120)
    assert run.outcomes["tests/test_children.py::test_a_child_reuses_what_was_compiled"] == "passed", run.details
    assert not list(repo.rglob("__pycache__")) and not list(repo.rglob("*.pyc")), "the worktree gets no bytecode"


@pytest.mark.docker
def test_a_suite_that_cannot_run_says_why(sandboxed_repo: tuple[Path, DockerSandbox]) -> None:
    repo, sandbox = sandboxed_repo
    (repo / "tests" / "conftest.py").write_text("import not_installed_anywhere\n")
    broken = run_suite(sandbox, "python3 -m pytest -q", timeout_s=120)
    assert not broken.ran and "not_installed_anywhere" in broken.output_tail
    assert broken.reason.startswith("pytest exit code 4") or broken.reason.startswith("pytest exit code 2")
    slow = run_suite(sandbox, "sleep 30", timeout_s=1)
    assert not slow.ran and slow.reason == "timed out after 1s"
    missing = run_suite(sandbox, "no-such-runner", timeout_s=30)
    assert not missing.ran and missing.reason.startswith("command not found")


@pytest.mark.docker
def test_other_runners_are_judged_by_exit_code_and_counts(sandboxed_repo: tuple[Path, DockerSandbox]) -> None:
    _, sandbox = sandboxed_repo
    passing = run_suite(sandbox, "echo 'test result: ok. 3 passed; 0 failed; 0 ignored'", timeout_s=30)
    assert passing.ran and not passing.per_test
    assert passing.outcomes == {WHOLE_SUITE: "passed"} and passing.counts == {"passed": 3}
    failing = run_suite(sandbox, "echo 'test result: FAILED. 2 passed; 1 failed; 0 ignored'; exit 101", timeout_s=30)
    assert failing.ran and failing.outcomes == {WHOLE_SUITE: "failed"}
    assert compare(passing, failing).regressed == [WHOLE_SUITE]
    # Counts are no per-test evidence: the same counts before and after do not make a branch verified.
    only_counts = judge(passing, passing, compare(passing, passing), [])
    assert only_counts.verdict == "unverified" and "no per-test results" in only_counts.reason
    assert rerun_selected(sandbox, "make test", [WHOLE_SUITE], timeout_s=30) is None


@pytest.mark.docker
def test_modules_that_cannot_be_imported_are_recorded_and_the_rest_of_the_suite_counts(
    sandboxed_repo: tuple[Path, DockerSandbox],
) -> None:
    repo, sandbox = sandboxed_repo
    (repo / "tests" / "test_needs_extra.py").write_text("import not_installed_anywhere\n\n\ndef test_x():\n    pass\n")
    (repo / "tests" / "test_plain.py").write_text("def test_plain():\n    assert True\n")
    command = "python3 -m pytest -q"
    baseline = run_suite(sandbox, command, timeout_s=120)
    missing = "ModuleNotFoundError: No module named 'not_installed_anywhere'"
    assert baseline.ran and baseline.counts == {"passed": 3}
    assert baseline.import_errors == {"tests/test_needs_extra.py": missing}
    assert baseline.describe() == f"3 passed; 1 module could not be imported (tests/test_needs_extra.py: {missing})"
    assert judge(baseline, baseline, compare(baseline, baseline), []).verdict == "verified"
    # The change makes test_geometry.py unimportable: one regression, named by the module.
    (repo / "pkg" / "report.py").write_text("import also_not_installed\n")
    after = run_suite(sandbox, command, timeout_s=120)
    assert after.ran and after.counts == {"passed": 1} and len(after.import_errors) == 2
    comparison = compare(baseline, after)
    assert comparison.regressed == comparison.unimportable == ["tests/test_geometry.py"]
    check = judge(baseline, after, comparison, [])
    assert check.verdict == "regressed"
    message = repair_message(check)
    assert "- tests/test_geometry.py (this test module could not be imported any more)" in message
    assert "also_not_installed" in message
    # Only a suite none of whose modules imports did not run.
    (repo / "tests" / "test_plain.py").write_text("import also_not_installed\n")
    nothing = run_suite(sandbox, command, timeout_s=120)
    assert not nothing.ran and nothing.reason.startswith("3 modules could not be imported (")


# A runner of the project's own in Django's way: tests/runtests.py on top of unittest, named by tox.ini, run from
# tests/ with the repository on PYTHONPATH (tox's setenv).
OWN_RUNNER = {
    "tox.ini": "[testenv]\nchangedir = tests\nsetenv =\n    PYTHONPATH = {toxinidir}\n"
    "commands =\n    pip install -e ..\n    {envpython} runtests.py {posargs}\n",
    "tests/runtests.py": """
import argparse
import sys
import unittest

parser = argparse.ArgumentParser()
parser.add_argument("labels", nargs="*")
parser.add_argument("-v", "--verbosity", type=int, default=1)
parser.add_argument("-k", action="append", dest="patterns")
arguments = parser.parse_args()
loader = unittest.TestLoader()
loader.testNamePatterns = [f"*{pattern}*" for pattern in arguments.patterns or []] or None
suite = loader.loadTestsFromNames(arguments.labels) if arguments.labels else loader.discover(".", top_level_dir=".")
sys.exit(not unittest.TextTestRunner(verbosity=arguments.verbosity).run(suite).wasSuccessful())
""",
    "tests/geometry/__init__.py": "",
    "tests/geometry/test_area.py": """
import unittest

from pkg.geometry import compute_area


class AreaTests(unittest.TestCase):
    def test_area(self):
        print("a test that prints")
        self.assertEqual(compute_area(2, 3), 6)

    def test_square(self):
        self.assertEqual(compute_area(2, 2), 4)

    @unittest.skip("not today")
    def test_later(self):
        pass
""",
    "tests/geometry/test_needs_extra.py": "import not_installed_anywhere\n",
}


@pytest.mark.docker
def test_the_project_own_unittest_runner_gives_per_test_evidence(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {**SAMPLE_FILES, **OWN_RUNNER})
    chosen = detect_test_command(repo)
    assert chosen is not None and chosen.command == "cd tests && PYTHONPATH=.. python3 runtests.py"
    with DockerSandbox("refactor-agent-sandbox:latest", repo, run_id="test-gate-runner") as sandbox:
        baseline = run_suite(sandbox, chosen.command, timeout_s=120)
        assert baseline.ran and baseline.per_test
        assert baseline.outcomes == {
            "geometry.test_area.AreaTests.test_area": "passed",
            "geometry.test_area.AreaTests.test_square": "passed",
            "geometry.test_area.AreaTests.test_later": "skipped",
        }
        missing = "ModuleNotFoundError: No module named 'not_installed_anywhere'"
        assert baseline.import_errors == {"geometry.test_needs_extra": missing}
        assert judge(baseline, baseline, compare(baseline, baseline), []).verdict == "verified"
        geometry = repo / "pkg" / "geometry.py"
        geometry.write_text(geometry.read_text().replace("width * height", "width + height"))
        after = run_suite(sandbox, chosen.command, timeout_s=120)
        comparison = compare(baseline, after)
        assert comparison.regressed == ["geometry.test_area.AreaTests.test_area"]
        assert "AssertionError: 5 != 6" in after.details["geometry.test_area.AreaTests.test_area"]
        rerun = rerun_selected(sandbox, chosen.command, comparison.regressed, timeout_s=120)
        assert rerun is not None and rerun.outcomes == {"geometry.test_area.AreaTests.test_area": "failed"}
        assert judge(baseline, after, settle_flaky(comparison, rerun), []).verdict == "regressed"


def test_a_module_that_no_longer_imports_counts_its_tests_that_passed() -> None:
    """Its two passing tests were "1 test that passed had no result": the module's one entry among the regressed."""
    baseline = _suite({"t.py::a": "passed", "t.py::b": "passed", "u.py::c": "passed"})
    broken = SuiteRun(command="pytest", ran=False, reason="exit code 2", import_errors={"t.py": "SyntaxError"})
    check = judge(baseline, broken, compare(baseline, broken), [])
    assert check.reason == "the suite did not run after the change (exit code 2): 3 tests that passed had no result"
    collected = _suite({"u.py::c": "failed"}).model_copy(update={"import_errors": {"t.py": "ImportError: x"}})
    check = judge(baseline, collected, compare(baseline, collected), [])
    assert check.verdict == "regressed" and check.reason == "3 tests regressed"
