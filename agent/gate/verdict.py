"""A task's verdict from its gate checks, the message that asks the model to repair, and the commit trailers."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from agent.gate.compare import Comparison
from agent.gate.results import SuiteRun

Verdict = Literal["verified", "unverified", "regressed"]
# How many regressed tests the repair message names with their output; the rest are listed by id only.
DETAILED_TESTS = 5
LISTED_TESTS = 50


class GateCheck(BaseModel):
    """One gate pass after the model finished: the suite again, compared with the baseline, and the parse check."""

    verdict: Verdict
    reason: str
    final: SuiteRun | None = None
    comparison: Comparison | None = None
    syntax_errors: list[str] = []


def judge(
    baseline: SuiteRun | None, final: SuiteRun | None, comparison: Comparison | None, syntax_errors: list[str]
) -> GateCheck:
    facts = {"final": final, "comparison": comparison, "syntax_errors": syntax_errors}
    broken = f"; {len(syntax_errors)} changed file(s) no longer parse" if syntax_errors else ""
    if baseline is None or not baseline.ran or comparison is None:
        why = "no test command found" if baseline is None else f"the suite did not run at baseline: {baseline.reason}"
        if syntax_errors:
            return GateCheck(verdict="regressed", reason=f"{why}{broken}", **facts)
        return GateCheck(verdict="unverified", reason=why, **facts)
    if comparison.regressed or syntax_errors:
        tests = f"{len(comparison.regressed)} test(s) regressed" if comparison.regressed else "no test regressed"
        return GateCheck(verdict="regressed", reason=f"{tests}{broken}", **facts)
    notes = [
        f"{len(getattr(comparison, name))} {name.replace('_', ' ')}" for name in ("fixed", "flaky", "still_failing")
    ]
    return GateCheck(verdict="verified", reason="no regressions (" + ", ".join(notes) + ")", **facts)


def repair_message(check: GateCheck) -> str:
    """One user message naming what broke, with the relevant output; appended, so the cached prefix stays valid."""
    lines = ["The verification gate ran the tests after your change and found problems. Fix them, then call finish."]
    if check.syntax_errors:
        lines += ["", "Files that parsed before your change and no longer do:"]
        lines += [f"- {error}" for error in check.syntax_errors]
    comparison, final = check.comparison, check.final
    if comparison is not None and comparison.regressed:
        lines += ["", f"{len(comparison.regressed)} test(s) passed before your change and do not now:"]
        lines += [
            f"- {test}" + (" (no longer exists)" if test in comparison.removed else "")
            for test in comparison.regressed[:LISTED_TESTS]
        ]
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
