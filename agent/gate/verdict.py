"""A task's verdict from its gate checks, the message that asks the model to repair, and the commit trailers."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel

from agent.gate.compare import Comparison, regressed_tests
from agent.gate.results import SuiteRun
from agent.protocol.records import marked
from agent.safety.printable import counted, printable

Verdict = Literal["verified", "unverified", "regressed"]
# How many regressed tests the repair message names with their output; the rest are listed by id only.
DETAILED_TESTS = 5
LISTED_TESTS = 50
NAMED_IN_REASON = 3
VERDICT_TRAILER = "Refactor-Agent-Verdict"
TESTS_TRAILER = "Refactor-Agent-Tests"
INFRASTRUCTURE_TRAILER = "Refactor-Agent-Test-Infrastructure"
_TESTS_VALUE = re.compile(r"^(?P<final>.*) \(baseline (?P<baseline>.*)\)$")


class GateCheck(BaseModel):
    """One gate pass after the model finished: the suite again, compared with the baseline, and the parse check."""

    verdict: Verdict
    reason: str
    final: SuiteRun | None = None
    comparison: Comparison | None = None
    syntax_errors: list[str] = []
    # Files the task changed that the suite reads besides the tests: the verdict rests on them.
    test_infrastructure: list[str] = []


def infrastructure_note(test_infrastructure: list[str]) -> str:
    named = ", ".join(test_infrastructure[:NAMED_IN_REASON])
    more = len(test_infrastructure) - NAMED_IN_REASON
    return f"test configuration changed: {named}" + (f" and {more} more" if more > 0 else "")


def judge(
    baseline: SuiteRun | None,
    final: SuiteRun | None,
    comparison: Comparison | None,
    syntax_errors: list[str],
    test_infrastructure: list[str] | None = None,
) -> GateCheck:
    check = _judge(baseline, final, comparison, syntax_errors)
    if not test_infrastructure:
        return check
    reason = f"{infrastructure_note(test_infrastructure)}; {check.reason}"
    return check.model_copy(update={"test_infrastructure": test_infrastructure, "reason": reason})


def _judge(
    baseline: SuiteRun | None, final: SuiteRun | None, comparison: Comparison | None, syntax_errors: list[str]
) -> GateCheck:
    facts = {"final": final, "comparison": comparison, "syntax_errors": syntax_errors}
    parse = "no longer parses" if len(syntax_errors) == 1 else "no longer parse"
    broken = f"; {counted(len(syntax_errors), 'changed file')} {parse}" if syntax_errors else ""
    if baseline is None or not baseline.ran or comparison is None:
        why = "no test command found" if baseline is None else f"the suite did not run at baseline: {baseline.reason}"
        if syntax_errors:
            return GateCheck(verdict="regressed", reason=f"{why}{broken}", **facts)
        return GateCheck(verdict="unverified", reason=why, **facts)
    if final is not None and not final.ran and comparison.regressed:
        # Not one test failed: none ran (a timeout, a suite that no longer starts). Said as it happened.
        lost = f"{counted(regressed_tests(comparison, baseline), 'test')} that passed had no result"
        reason = f"the suite did not run after the change ({final.reason}): {lost}{broken}"
        return GateCheck(verdict="regressed", reason=reason, **facts)
    if comparison.regressed or syntax_errors:
        tests = (
            f"{counted(regressed_tests(comparison, baseline), 'test')} regressed"
            if comparison.regressed
            else "no test regressed"
        )
        return GateCheck(verdict="regressed", reason=f"{tests}{broken}", **facts)
    if final is not None and not final.per_test:
        # An exit code and a count are no evidence that the tests that passed before pass now.
        why = f"the test command reports no per-test results, only {final.describe()}: not verified"
        return GateCheck(verdict="unverified", reason=why, **facts)
    notes = [
        f"{len(getattr(comparison, name))} {name.replace('_', ' ')}" for name in ("fixed", "flaky", "still_failing")
    ]
    return GateCheck(verdict="verified", reason="no regressions (" + ", ".join(notes) + ")", **facts)


def _regression_note(comparison: Comparison, test: str) -> str:
    if test in comparison.removed:
        return " (no longer exists)"
    if test in comparison.unimportable:
        return " (this test module could not be imported any more)"
    return ""


def repair_message(check: GateCheck) -> str:
    """One user message naming what broke, with the relevant output; appended, so the cached prefix stays valid."""
    lines = ["The verification gate ran the tests after your change and found problems. Fix them, then call finish."]
    if check.syntax_errors:
        lines += ["", "Files that parsed before your change and no longer do:"]
        lines += [f"- {error}" for error in check.syntax_errors]
    comparison, final = check.comparison, check.final
    if comparison is not None and comparison.regressed:
        lines += ["", f"{counted(len(comparison.regressed), 'test')} passed before your change and do not now:"]
        lines += [f"- {test}{_regression_note(comparison, test)}" for test in comparison.regressed[:LISTED_TESTS]]
        if len(comparison.regressed) > LISTED_TESTS:
            lines.append(f"- ... and {len(comparison.regressed) - LISTED_TESTS} more")
        for test in comparison.regressed[:DETAILED_TESTS]:
            detail = final.details.get(test) if final is not None else None
            if detail:
                lines += ["", f"Output of {test}:", detail]
    if final is not None and not final.ran:
        lines += ["", f"The suite did not run at all: {final.reason}", final.output_tail]
    return "\n".join(lines)


def evidence_trailer(baseline: SuiteRun | None, final: SuiteRun | None) -> str | None:
    """`412 passed, 3 failed (baseline 412 passed, 3 failed)`; None when there was no suite to run."""
    if baseline is None:
        return None
    after = final.describe() if final is not None else "not run"
    return f"{after} (baseline {baseline.describe()})"


def verdict_trailers(baseline: SuiteRun | None, check: GateCheck) -> dict[str, str]:
    """The verdict (marked), the tests before and after, and the test infrastructure the task changed; each one
    line (a test's output or a file name could otherwise add a trailer line of its own)."""
    trailers = {VERDICT_TRAILER: marked(check.verdict, check.test_infrastructure)}
    tests = evidence_trailer(baseline, check.final)
    if tests:
        trailers[TESTS_TRAILER] = tests
    if check.test_infrastructure:
        trailers[INFRASTRUCTURE_TRAILER] = ", ".join(check.test_infrastructure)
    return {key: printable(value, one_line=True) for key, value in trailers.items()}


# A commit replayed onto a new base by the gate without the model (review rebase, a night's stale task).
REBASED_ONTO_TRAILER = "Refactor-Agent-Rebased-Onto"


def read_trailers(message: str) -> dict[str, str]:
    """refactor-agent's trailers from a commit message: its last paragraph only (the model's text comes before)."""
    lines = message.strip().rpartition("\n\n")[2].splitlines()
    return dict(line.split(": ", 1) for line in lines if line.startswith("Refactor-Agent-") and ": " in line)


def split_tests_trailer(value: str) -> tuple[str, str] | None:
    """(baseline, final) from a Tests trailer's value."""
    found = _TESTS_VALUE.match(value)
    return (found["baseline"], found["final"]) if found else None
