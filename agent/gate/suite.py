"""Running the repository's test suite in the task's sandbox, and reading back what it reported.

pytest is asked for a JUnit report through PYTEST_ADDOPTS, so it works whatever wraps pytest (`make test`,
`tox -e py`, a shell script); the report goes to the sandbox's /tmp, never into the worktree. `go test` gets
`-json`. Anything else is judged by its exit code and the counts it prints.
"""

from __future__ import annotations

import re
import shlex

from agent.gate.results import (
    PYTEST_DID_NOT_RUN,
    WHOLE_SUITE,
    Outcome,
    SuiteRun,
    count,
    parse_counts,
    parse_go_json,
    parse_junit,
)
from tools.base import Executor

REPORT_DIR = "/tmp/.refactor-agent"
JUNIT_PATH = f"{REPORT_DIR}/junit.xml"
# Python reads compiled modules from here, emptied before each run, instead of the worktree's __pycache__: a .pyc
# the model planted there with the header of a broken source would otherwise run in its place.
PYCACHE_DIR = f"{REPORT_DIR}/pycache"
# A JUnit report of tens of thousands of tests is megabytes; one larger than this is judged by its counts.
MAX_REPORT_BYTES = 32 * 1024 * 1024
MAX_OUTPUT_BYTES = 256_000
OUTPUT_TAIL_CHARS = 4000
EXIT_COMMAND_NOT_FOUND = 127
_GO_TEST = re.compile(r"^(\s*go\s+test)\b(?!.*\s-json\b)")


def _is_pytest(test_command: str) -> bool:
    return "pytest" in test_command


def instrumented(test_command: str) -> str:
    """The command as the gate runs it: a JUnit report for pytest, JSON events for go test; Python with no user
    site-packages (HOME is the sandbox's /tmp, where the model can write a .pth) and no bytecode of the model's."""
    command = _GO_TEST.sub(r"\1 -json", test_command, count=1)
    junit = f"--junitxml={JUNIT_PATH} -o junit_family=xunit1"
    return (
        f"mkdir -p {REPORT_DIR} && rm -rf {JUNIT_PATH} {PYCACHE_DIR} && "
        f"export PYTHONNOUSERSITE=1 PYTHONPYCACHEPREFIX={PYCACHE_DIR} && "
        f'export PYTEST_ADDOPTS="${{PYTEST_ADDOPTS:-}} {junit}" && {command}'
    )


def _tail(output: str) -> str:
    return output[-OUTPUT_TAIL_CHARS:]


def _last_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"


def run_suite(executor: Executor, test_command: str, *, timeout_s: float) -> SuiteRun:
    """Run the suite once; `ran` is False (with the reason) when it could not run at all."""
    result = executor.execute(instrumented(test_command), timeout_s=timeout_s, max_output_bytes=MAX_OUTPUT_BYTES)
    base = {"command": test_command, "exit_code": result.exit_code, "duration_s": round(result.duration_s, 3)}
    tail = _tail(result.output)
    if result.disk_full is not None:
        return SuiteRun(**base, ran=False, reason=f"stopped: it filled the disk ({result.disk_full})", output_tail=tail)
    if result.sandbox_restarted and result.exit_code is None:
        return SuiteRun(**base, ran=False, reason="killed: the sandbox hit its process limit", output_tail=tail)
    if result.timed_out:
        return SuiteRun(**base, ran=False, reason=f"timed out after {timeout_s:g}s", output_tail=tail)
    if result.exit_code is None:
        return SuiteRun(**base, ran=False, reason="killed: its output passed the capture ceiling", output_tail=tail)
    if result.exit_code == EXIT_COMMAND_NOT_FOUND:
        return SuiteRun(**base, ran=False, reason=f"command not found: {_last_line(result.output)}", output_tail=tail)
    outcomes, details = _per_test(executor, test_command, result.output)
    if outcomes and any(outcome in ("passed", "failed") for outcome in outcomes.values()):
        counts = count(outcomes)
        return SuiteRun(
            **base, ran=True, outcomes=outcomes, details=details, counts=counts, per_test=True, output_tail=tail
        )
    if _is_pytest(test_command) and result.exit_code in PYTEST_DID_NOT_RUN:
        meaning = PYTEST_DID_NOT_RUN[result.exit_code]
        reason = f"pytest exit code {result.exit_code}, {meaning}: {_last_line(result.output)}"
        return SuiteRun(**base, ran=False, reason=reason, outcomes=outcomes, details=details, output_tail=tail)
    counts = parse_counts(result.output)
    if result.exit_code != 0 and not counts:
        reason = f"exit code {result.exit_code} with no test counts: {_last_line(result.output)}"
        return SuiteRun(**base, ran=False, reason=reason, output_tail=tail)
    whole: Outcome = "passed" if result.exit_code == 0 else "failed"
    return SuiteRun(
        **base,
        ran=True,
        outcomes={WHOLE_SUITE: whole},
        details={WHOLE_SUITE: tail} if whole == "failed" else {},
        counts=counts or {whole: 1},
        output_tail=tail,
    )


def _per_test(executor: Executor, test_command: str, output: str) -> tuple[dict[str, Outcome], dict[str, str]]:
    if test_command.lstrip().startswith("go test"):
        return parse_go_json(output) or {}, {}
    report = executor.execute(f"cat {JUNIT_PATH} 2>/dev/null", timeout_s=60, max_output_bytes=MAX_REPORT_BYTES)
    if report.exit_code != 0 or report.truncated or not report.output.strip():
        return {}, {}
    return parse_junit(report.output.encode("utf-8", errors="replace")) or ({}, {})


def rerun_selected(executor: Executor, test_command: str, tests: list[str], *, timeout_s: float) -> SuiteRun | None:
    """The named tests alone, once (the flaky check); None when the runner cannot select tests by id."""
    if not tests or WHOLE_SUITE in tests:
        return None
    if _is_pytest(test_command):
        selection = " ".join(shlex.quote(test) for test in tests)
        return run_suite(executor, f"{test_command} {selection}", timeout_s=timeout_s)
    if test_command.lstrip().startswith("go test"):
        names = sorted({test.rpartition("::")[2] for test in tests if "::" in test})
        pattern = "^(" + "|".join(re.escape(name) for name in names) + ")$"
        return run_suite(executor, f"{test_command} -run {shlex.quote(pattern)}", timeout_s=timeout_s)
    return None
