"""The gate as a stage of a task: the baseline before the model's first turn, the check after it finishes.

It only needs somewhere to run commands (the task's sandbox), the test command and a way to read a changed
file before and after; the runner decides what to do with a regression (ask for a repair, commit, report).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agent.gate.baseline import BaselineCache
from agent.gate.compare import compare, settle_flaky
from agent.gate.infrastructure import infrastructure_in
from agent.gate.reading import ReadFiles
from agent.gate.results import SuiteRun
from agent.gate.suite import rerun_selected, run_suite
from agent.gate.syntax import syntax_regressions
from agent.gate.verdict import GateCheck, judge
from agent.protocol.events import Baseline, Event, GateEvent, GateStart
from tools.base import Executor

Emit = Callable[[Event], None]


@dataclass
class GateRecord:
    """What the gate saw of one task: the baseline, the last check, how many repair rounds it asked for, and the
    regressed count of each check in order (the repair history)."""

    baseline: SuiteRun | None = None
    check: GateCheck | None = None
    repair_rounds: int = 0
    rounds: list[int] = field(default_factory=list)


class Gate:
    def __init__(
        self,
        executor: Executor,
        test_command: str | None,
        *,
        timeout_s: float,
        cache: BaselineCache,
        cache_key: str | None,
        emit: Emit,
        unavailable: str | None = None,
    ) -> None:
        self.executor = executor
        self.test_command = test_command
        self.timeout_s = timeout_s
        self.cache = cache
        self.cache_key = cache_key
        self.emit = emit
        # Why the suite cannot run at all (the environment's build failed): the baseline records it as not run.
        self.unavailable = unavailable
        self.baseline_run: SuiteRun | None = None

    def baseline(self) -> SuiteRun | None:
        """The suite on the untouched worktree, from the cache when this commit, command and image ran it."""
        if self.unavailable is not None:
            cached, suite = None, SuiteRun(command=self.test_command or "", ran=False, reason=self.unavailable)
        elif self.test_command is None:
            self.emit(Baseline(ran=False, cached=False, result="no test command found"))
            return None
        else:
            cached = self.cache.get(self.cache_key) if self.cache_key else None
            if cached is None:
                self.emit(GateStart(kind="baseline"))
            suite = cached or run_suite(self.executor, self.test_command, timeout_s=self.timeout_s)
            if cached is None and self.cache_key:
                self.cache.put(self.cache_key, suite)
        self.baseline_run = suite
        self.emit(
            Baseline(ran=suite.ran, cached=cached is not None, result=suite.describe(), duration_s=suite.duration_s)
        )
        return suite

    def check(self, changed_paths: list[str], read: ReadFiles, *, unstaged: Sequence[str] = ()) -> GateCheck:
        """The suite again, compared with the baseline (new failures re-run once alone), and the parse check.

        `unstaged`: files the task made that the commit leaves out (ignored, too large); the suite reads them too,
        so they count when the gate looks for changed test infrastructure."""
        baseline = self.baseline_run
        final = comparison = None
        if baseline is not None and baseline.ran and self.test_command is not None:
            self.emit(GateStart(kind="check", tests=sum(baseline.counts.values()) or None))
            final = run_suite(self.executor, self.test_command, timeout_s=self.timeout_s)
            comparison = compare(baseline, final)
            if comparison.regressed and final.ran:
                self.emit(GateStart(kind="rerun", tests=len(comparison.regressed)))
                rerun = rerun_selected(self.executor, self.test_command, comparison.regressed, timeout_s=self.timeout_s)
                comparison = settle_flaky(comparison, rerun)
        infrastructure = infrastructure_in([*changed_paths, *unstaged], self.test_command, read)
        check = judge(baseline, final, comparison, syntax_regressions(changed_paths, read), infrastructure)
        self.emit(
            GateEvent(
                verdict=check.verdict,
                reason=check.reason,
                result=final.describe() if final else None,
                regressed=comparison.regressed if comparison else [],
                syntax_errors=check.syntax_errors,
                test_infrastructure=check.test_infrastructure,
            )
        )
        return check
