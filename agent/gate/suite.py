"""Running the repository's test suite in the task's sandbox, and reading back what it reported.

pytest is asked for a JUnit report through PYTEST_ADDOPTS, so it works whatever wraps pytest (`make test`,
a shell script); the report goes to the sandbox's /tmp, never into the worktree. It is also told to go on past
modules that fail to import: they are recorded, and the rest of the suite is evidence. unittest and the runners
built on it (Django's runtests.py, manage.py test) are made verbose, one line per test, and their whole output is
kept in the sandbox's /tmp to be read back (the captured output keeps only its head and tail). `go test` gets
`-json`. Anything else is judged by its exit code and the counts it prints.
"""

from __future__ import annotations

import re
import shlex

from agent.gate.results import (
    PYTEST_DID_NOT_RUN,
    WHOLE_SUITE,
    Outcome,
    RunnerReport,
    SuiteRun,
    count,
    describe_import_errors,
    parse_counts,
    parse_go_json,
    parse_junit,
)
from agent.gate.unittest_output import parse_unittest
from tools.base import Executor

REPORT_DIR = "/tmp/.refactor-agent"
JUNIT_PATH = f"{REPORT_DIR}/junit.xml"
# Python reads compiled modules from here, emptied before each run, instead of the worktree's __pycache__: a .pyc
# the model planted there with the header of a broken source would otherwise run in its place. The suite writes
# there too (the sandbox's PYTHONDONTWRITEBYTECODE, which keeps the worktree clean, is lifted for it): a suite whose
# tests start Python processes would compile every module each of them imports again (typer: 4 s a test, not 0.7).
PYCACHE_DIR = f"{REPORT_DIR}/pycache"
OUTPUT_LOG = f"{REPORT_DIR}/output.log"
# A JUnit report of tens of thousands of tests is megabytes; one larger than this is judged by its counts.
MAX_REPORT_BYTES = 32 * 1024 * 1024
MAX_OUTPUT_BYTES = 256_000
OUTPUT_TAIL_CHARS = 4000
EXIT_COMMAND_NOT_FOUND = 127
_GO_TEST = re.compile(r"^(\s*go\s+test)\b(?!.*\s-json\b)")
# unittest itself (-v), and Django's runners on top of it (-v 2): the last command of the line must be one.
_UNITTEST = re.compile(r"\s-m\s+unittest\b")
_DJANGO = re.compile(r"(?:runtests\.py|manage\.py\s+test|-m\s+django\s+test)\b")
_VERBOSE = re.compile(r"\s(?:-v\S*|--verbose|--verbosity\S*)(?:\s|$)")


def _is_pytest(test_command: str) -> bool:
    return "pytest" in test_command


def verbose_runner(test_command: str) -> str | None:
    """The command made verbose when it runs unittest or Django's runner, else None: their per-test lines."""
    last = test_command.rsplit("&&", 1)[-1]
    if any(operator in last for operator in ("|", ";", ">", "<", "&")):
        return None
    if not (_UNITTEST.search(f" {last}") or _DJANGO.search(last)):
        return None
    if _VERBOSE.search(f" {last} "):
        return test_command
    return f"{test_command} -v" if _UNITTEST.search(f" {last}") else f"{test_command} -v 2"


def instrumented(test_command: str) -> str:
    """The command as the gate runs it: a JUnit report for pytest, JSON events for go test, unittest's verbose
    lines kept whole in OUTPUT_LOG (pipefail: the runner's exit code, not tee's); Python with no user
    site-packages (HOME is the sandbox's /tmp, where the model can write a .pth) and no bytecode of the model's:
    only what this run compiled, in PYCACHE_DIR."""
    command = _GO_TEST.sub(r"\1 -json", test_command, count=1)
    verbose = verbose_runner(command)
    if verbose is not None:
        command = f"set -o pipefail && {{ {verbose} ; }} 2>&1 | tee {OUTPUT_LOG}"
    junit = f"--junitxml={JUNIT_PATH} -o junit_family=xunit1 --continue-on-collection-errors"
    return (
        f"mkdir -p {REPORT_DIR} && rm -rf {JUNIT_PATH} {OUTPUT_LOG} {PYCACHE_DIR} && "
        f"export PYTHONNOUSERSITE=1 PYTHONPYCACHEPREFIX={PYCACHE_DIR} && unset PYTHONDONTWRITEBYTECODE && "
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
        return SuiteRun(**base, ran=False, reason=f"killed: {result.sandbox_restarted}", output_tail=tail)
    if result.timed_out:
        return SuiteRun(**base, ran=False, reason=f"timed out after {timeout_s:g}s", output_tail=tail)
    if result.exit_code is None:
        return SuiteRun(**base, ran=False, reason="killed: its output passed the capture ceiling", output_tail=tail)
    if result.exit_code == EXIT_COMMAND_NOT_FOUND:
        return SuiteRun(**base, ran=False, reason=f"command not found: {_last_line(result.output)}", output_tail=tail)
    report = _per_test(executor, test_command, result.output)
    outcomes, details, import_errors = report.outcomes, report.details, report.import_errors
    if outcomes and any(outcome in ("passed", "failed") for outcome in outcomes.values()):
        counts = count(outcomes)
        return SuiteRun(
            **base,
            ran=True,
            outcomes=outcomes,
            import_errors=import_errors,
            details=details,
            counts=counts,
            per_test=True,
            output_tail=tail,
        )
    if import_errors:  # not one test could run: every module it found failed to import
        reason = describe_import_errors(import_errors)
        return SuiteRun(
            **base, ran=False, reason=reason, import_errors=import_errors, details=details, output_tail=tail
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


def _read_report(executor: Executor, path: str) -> str | None:
    report = executor.execute(f"cat {path} 2>/dev/null", timeout_s=60, max_output_bytes=MAX_REPORT_BYTES)
    if report.exit_code != 0 or report.truncated or not report.output.strip():
        return None
    return report.output


def _per_test(executor: Executor, test_command: str, output: str) -> RunnerReport:
    if test_command.lstrip().startswith("go test"):
        return RunnerReport(outcomes=parse_go_json(output) or {})
    if verbose_runner(test_command) is not None:
        return parse_unittest(_read_report(executor, OUTPUT_LOG) or output) or RunnerReport()
    junit = _read_report(executor, JUNIT_PATH)
    return (parse_junit(junit.encode("utf-8", errors="replace")) if junit else None) or RunnerReport()


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
    if verbose_runner(test_command) is not None:  # unittest's -k (Django's too) matches a part of the test's id
        selection = " ".join(f"-k {shlex.quote(test)}" for test in tests)
        return run_suite(executor, f"{test_command} {selection}", timeout_s=timeout_s)
    return None
