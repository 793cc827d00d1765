"""Baseline against after: what the change broke, fixed, or left as it was."""

from __future__ import annotations

from pydantic import BaseModel

from agent.gate.results import SuiteRun


class Comparison(BaseModel):
    # Passed at baseline and now fail, error, are skipped or are gone; and tests the change added that fail.
    regressed: list[str] = []
    removed: list[str] = []  # the gone ones among the regressed, named apart for the reviewer
    fixed: list[str] = []
    still_failing: list[str] = []
    flaky: list[str] = []


def compare(baseline: SuiteRun, after: SuiteRun) -> Comparison:
    before, now = baseline.outcomes, after.outcomes
    regressed, removed, fixed, still_failing = [], [], [], []
    for test, outcome in sorted(before.items()):
        current = now.get(test)
        if outcome == "passed":
            if current is None:
                removed.append(test)
                regressed.append(test)
            elif current != "passed":
                regressed.append(test)
        elif outcome in ("failed", "error"):
            if current == "passed":
                fixed.append(test)
            elif current in ("failed", "error"):
                still_failing.append(test)
    regressed += sorted(test for test, outcome in now.items() if test not in before and outcome in ("failed", "error"))
    return Comparison(regressed=regressed, removed=removed, fixed=fixed, still_failing=still_failing)


def settle_flaky(comparison: Comparison, rerun: SuiteRun | None) -> Comparison:
    """Regressions that pass when re-run alone are flaky, not regressions."""
    if rerun is None or not rerun.ran:
        return comparison
    flaky = sorted(test for test in comparison.regressed if rerun.outcomes.get(test) == "passed")
    return comparison.model_copy(
        update={"regressed": [test for test in comparison.regressed if test not in flaky], "flaky": flaky}
    )
