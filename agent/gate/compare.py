"""Baseline against after: what the change broke, fixed, or left as it was.

A test's id is not always stable between two runs of the same tree: parametrize ids made from the time, random
values or memory addresses (`test_x[12-01-2026 20:54:23]`) differ every run. A baseline id that is gone and a new id
of the same test function (the id before `[`) are matched by count, and compared as one test; only what stays
unmatched is gone or new.

A test module that imported at baseline and does not now is one regression, named by its path; its tests are not
listed one by one as gone.
"""

from __future__ import annotations

from collections import defaultdict

from pydantic import BaseModel

from agent.gate.results import SuiteRun


class Comparison(BaseModel):
    # Passed at baseline and now fail, error, are skipped or are gone; and tests the change added that fail.
    regressed: list[str] = []
    removed: list[str] = []  # the gone ones among the regressed, named apart for the reviewer
    fixed: list[str] = []
    still_failing: list[str] = []
    flaky: list[str] = []
    unimportable: list[str] = []  # modules among the regressed that imported at baseline and do not now
    # Baseline ids matched to a new id of the same test function (an id that changes every run): old -> new.
    renamed: dict[str, str] = {}


def function_of(test: str) -> str:
    """The id without its parameters: `tests/t.py::test_x[12-01-2026 20:54:23]` -> `tests/t.py::test_x`."""
    return test.split("[", 1)[0]


def match_renamed(gone: list[str], new: list[str]) -> dict[str, str]:
    """Gone and new ids of the same test function paired by count, in order (old -> new)."""
    by_function: dict[str, list[str]] = defaultdict(list)
    for test in sorted(new):
        by_function[function_of(test)].append(test)
    pairs = {}
    for test in sorted(gone):
        candidates = by_function.get(function_of(test))
        if candidates:
            pairs[test] = candidates.pop(0)
    return pairs


def _in_module(test: str, modules: list[str]) -> bool:
    return any(test.startswith(f"{module}::") for module in modules)


def regressed_tests(comparison: Comparison, baseline: SuiteRun) -> int:
    """How many tests the regressed entries stand for: a module that no longer imports is one entry for all its
    tests that passed at baseline (at least one), which the reason counts as tests, not as one."""
    modules = comparison.unimportable
    tests = len(comparison.regressed) - len(modules)
    for module in modules:
        tests += max(
            1,
            sum(1 for test, outcome in baseline.outcomes.items() if outcome == "passed" and _in_module(test, [module])),
        )
    return tests


def compare(baseline: SuiteRun, after: SuiteRun) -> Comparison:
    unimportable = sorted(set(after.import_errors) - set(baseline.import_errors))
    before = {test: outcome for test, outcome in baseline.outcomes.items() if not _in_module(test, unimportable)}
    now = after.outcomes
    renamed = match_renamed([test for test in before if test not in now], [test for test in now if test not in before])
    matched_new = set(renamed.values())
    regressed, removed, fixed, still_failing = [], [], [], []
    for test, outcome in sorted(before.items()):
        current = now.get(renamed.get(test, test))
        if outcome == "passed":
            if current is None:
                removed.append(test)
                regressed.append(test)
            elif current != "passed":
                regressed.append(renamed.get(test, test))
        elif outcome in ("failed", "error"):
            if current == "passed":
                fixed.append(test)
            elif current in ("failed", "error"):
                still_failing.append(test)
    regressed += sorted(
        test
        for test, outcome in now.items()
        if test not in before and test not in matched_new and outcome in ("failed", "error")
    )
    regressed += unimportable
    return Comparison(
        regressed=regressed,
        removed=removed,
        fixed=fixed,
        still_failing=still_failing,
        renamed=renamed,
        unimportable=unimportable,
    )


def settle_flaky(comparison: Comparison, rerun: SuiteRun | None) -> Comparison:
    """Regressions that pass when re-run alone are flaky, not regressions."""
    if rerun is None or not rerun.ran:
        return comparison
    flaky = sorted(test for test in comparison.regressed if rerun.outcomes.get(test) == "passed")
    return comparison.model_copy(
        update={"regressed": [test for test in comparison.regressed if test not in flaky], "flaky": flaky}
    )
