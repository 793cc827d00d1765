"""eval.json's model, the totals with their 95% confidence interval, the Markdown report and --compare."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field, computed_field

from agent.protocol.records import now_iso

Outcome = Literal["solved", "unsolved", "invalid", "error"]
Z_95 = 1.959964  # the normal quantile of a two-sided 95% interval


class TaskResult(BaseModel):
    id: str
    outcome: Outcome
    reason: str = ""
    run_id: str | None = None
    gate_verdict: str | None = None
    untouched_exit: int | None = None  # the task's test on the untouched repository (0: it already passes)
    exit_code: int | None = None  # the task's test on the run's result
    test_output: str = ""  # the tail of the test's output on the result
    turns: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    cache_hit_ratio: float | None = None
    acceptance_rate: float | None = None
    wall_time_s: float = 0.0


class Totals(BaseModel):
    tasks: int
    solved: int
    unsolved: int
    invalid: int
    error: int
    scored: int = Field(description="tasks that count: all but the invalid ones (errors count as not solved)")
    solve_rate: float | None
    ci_low: float | None
    ci_high: float | None


class EvalReport(BaseModel):
    eval_id: str
    suite: str
    variant: str
    model: str
    ledger: bool
    symbol_tools: bool
    started_at: str = Field(default_factory=now_iso)
    ended_at: str | None = None
    results: list[TaskResult] = []

    @computed_field  # type: ignore[prop-decorator]
    @property
    def totals(self) -> Totals:
        counts = {outcome: sum(r.outcome == outcome for r in self.results) for outcome in Outcome.__args__}  # type: ignore[attr-defined]
        scored = len(self.results) - counts["invalid"]
        low, high = wilson_interval(counts["solved"], scored)
        return Totals(
            tasks=len(self.results),
            scored=scored,
            solve_rate=counts["solved"] / scored if scored else None,
            ci_low=low,
            ci_high=high,
            **counts,
        )


def wilson_interval(successes: int, trials: int, z: float = Z_95) -> tuple[float | None, float | None]:
    """Wilson's score interval: unlike the normal approximation it stays within [0, 1] and is honest about the
    few tasks a suite has (12 tasks solved 12 times is [0.76, 1], not [1, 1])."""
    if trials == 0:
        return None, None
    rate = successes / trials
    denominator = 1 + z * z / trials
    centre = (rate + z * z / (2 * trials)) / denominator
    margin = z * math.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - margin), min(1.0, centre + margin)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def totals_line(report: EvalReport) -> str:
    totals = report.totals
    return (
        f"{totals.solved}/{totals.scored} solved ({_percent(totals.solve_rate)}, 95% CI "
        f"{_percent(totals.ci_low)}-{_percent(totals.ci_high)}); {totals.unsolved} unsolved, "
        f"{totals.error} errors, {totals.invalid} invalid (their test passes untouched)"
    )


def render_markdown(report: EvalReport) -> str:
    rows = [
        f"| {r.id} | {r.outcome} | {r.turns} | {r.prompt_tokens + r.generated_tokens} | {r.wall_time_s:.1f} | "
        f"{_percent(r.cache_hit_ratio)} | {_percent(r.acceptance_rate)} | {r.reason.replace('|', '/')} |"
        for r in report.results
    ]
    return "\n".join(
        [
            f"# eval {report.eval_id}",
            "",
            f"Suite `{report.suite}`, variant {report.variant}, model {report.model}, "
            f"ledger {'on' if report.ledger else 'off'}, symbol tools {'on' if report.symbol_tools else 'off'}.",
            "",
            f"**{totals_line(report)}**",
            "",
            "| task | outcome | turns | tokens | wall s | cache hit | acceptance | reason |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    )


def compare(report: EvalReport, other: EvalReport) -> list[str]:
    """Per-task differences of outcome from `other` (an earlier eval.json), then both totals."""
    before = {result.id: result for result in other.results}
    lines = []
    for result in report.results:
        earlier = before.get(result.id)
        if earlier is None:
            lines.append(f"{result.id}: {result.outcome} (not in {other.eval_id})")
        elif earlier.outcome != result.outcome:
            lines.append(f"{result.id}: {earlier.outcome} -> {result.outcome}")
    if not lines:
        lines.append(f"no task changed its outcome from {other.eval_id}")
    return [*lines, f"{other.eval_id}: {totals_line(other)}", f"{report.eval_id}: {totals_line(report)}"]
