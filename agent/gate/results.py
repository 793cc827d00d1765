"""One run of a test suite, reduced to per-test outcomes (where the runner says them) and counts.

pytest reports through --junitxml (xunit1, which names each test's file, so a test can be re-run by its node id);
`go test -json` through its event stream; any other runner through the counts it prints and its exit code.
A test module that could not be imported is not a test: it is recorded apart (its path and the first line of its
error), so the rest of the suite still counts.
Everything parsed here was written inside the sandbox by the repository's own code: it is hostile input, parsed
with defusedxml and bounded regular expressions, and never executed.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import defusedxml.ElementTree as SafeElementTree
from defusedxml import DefusedXmlException
from pydantic import BaseModel

from sandbox.errors import one_line  # a newline a hostile path holds would break the trailers it goes into

Outcome = Literal["passed", "failed", "error", "skipped"]
OUTCOMES: tuple[Outcome, ...] = ("passed", "failed", "error", "skipped")
# The pseudo-test standing for the whole suite when the runner names no tests: its outcome is the exit code's.
WHOLE_SUITE = "(whole suite)"
# pytest's exit codes for "the suite did not run": interrupted, internal error, usage error, nothing collected.
PYTEST_DID_NOT_RUN = {2: "interrupted (collection errors?)", 3: "internal error", 4: "usage error", 5: "no tests"}
MAX_DETAIL_CHARS = 3000
MAX_ERROR_LINE_CHARS = 300
# What the record keeps of a regressed test's failure (the report and review show it; the repair message had it all).
FAILURE_LINES = 3
# How many unimportable modules describe() names; the rest are counted.
NAMED_IMPORT_ERRORS = 3


class SuiteRun(BaseModel):
    command: str
    ran: bool
    reason: str = ""
    exit_code: int | None = None
    outcomes: dict[str, Outcome] = {}
    # Test modules that could not be imported (collected with errors), by path: the first line of the error.
    import_errors: dict[str, str] = {}
    # What a failing test printed (its failure message and traceback), capped: the repair message quotes it.
    details: dict[str, str] = {}
    counts: dict[str, int] = {}
    per_test: bool = False
    output_tail: str = ""
    duration_s: float = 0.0

    def describe(self) -> str:
        """'1,289 passed, 3 failed; 2 modules could not be imported (...)'; why it did not run otherwise."""
        if not self.ran:
            return f"did not run: {self.reason}"
        parts = [f"{self.counts[name]:,} {name}" for name in OUTCOMES if self.counts.get(name)]
        ran = ", ".join(parts) or (f"exit code {self.exit_code}" if self.exit_code is not None else "no result")
        return f"{ran}; {describe_import_errors(self.import_errors)}" if self.import_errors else ran

    def failing(self) -> set[str]:
        return {test for test, outcome in self.outcomes.items() if outcome in ("failed", "error")}


def describe_import_errors(errors: dict[str, str]) -> str:
    """'2 modules could not be imported (tests/a.py: ModuleNotFoundError: ..., tests/b.py: ...)'."""
    named = [f"{module}: {line}" for module, line in sorted(errors.items())[:NAMED_IMPORT_ERRORS]]
    more = f", and {len(errors) - len(named)} more" if len(errors) > len(named) else ""
    modules = "1 module" if len(errors) == 1 else f"{len(errors)} modules"
    return f"{modules} could not be imported ({', '.join(named)}{more})"


def count(outcomes: dict[str, Outcome]) -> dict[str, int]:
    counts = dict.fromkeys(OUTCOMES, 0)
    for outcome in outcomes.values():
        counts[outcome] += 1
    return {name: number for name, number in counts.items() if number}


def _junit_node_id(case: dict[str, str]) -> str:
    """pytest's node id from an xunit1 testcase: file, then the class path after the module, then the name."""
    file, classname, name = case.get("file", ""), case.get("classname", ""), case.get("name", "")
    if not file:
        return f"{classname}::{name}" if classname else name
    module = file.removesuffix(".py").replace("/", ".")
    classes = classname.removeprefix(module).strip(".")
    return "::".join(part for part in (file, *classes.split(".")) if part) + f"::{name}"


def _failure_text(element: Any) -> str:
    message = element.get("message") or ""
    text = (element.text or "").strip()
    combined = f"{message}\n{text}".strip() if text and message not in text else (text or message)
    if len(combined) <= MAX_DETAIL_CHARS:
        return combined
    head = MAX_DETAIL_CHARS // 3
    return f"{combined[:head]}\n[...]\n{combined[-(MAX_DETAIL_CHARS - head) :]}"


def first_error_line(text: str) -> str:
    """The exception a traceback ends in: pytest marks its lines `E   `; the last of them names it."""
    marked = [line[1:].strip() for line in text.splitlines() if line.startswith("E ") and line[1:].strip()]
    lines = marked or [line.strip() for line in text.splitlines() if line.strip()]
    return one_line(lines[-1])[:MAX_ERROR_LINE_CHARS] if lines else "no error text"


def failure_lines(text: str) -> str:
    """The first lines of a test's failure (pytest's message comes first: `assert 7 == 10`), printable, bounded."""
    lines = [one_line(line.strip()) for line in text.splitlines() if line.strip()][:FAILURE_LINES]
    return "\n".join(lines)[:MAX_ERROR_LINE_CHARS]


class RunnerReport(BaseModel):
    outcomes: dict[str, Outcome] = {}
    details: dict[str, str] = {}
    import_errors: dict[str, str] = {}


def _collection_failure(case: Any) -> tuple[str, str] | None:
    """(module path, error text) when the testcase is pytest's record of a module that failed to collect."""
    error = case.find("error")
    if case.get("classname") or error is None or error.get("message") != "collection failure":
        return None
    return one_line(case.get("file") or case.get("name") or "?"), _failure_text(error)


def parse_junit(xml: bytes) -> RunnerReport | None:
    """Per-test outcomes, failure texts and unimportable modules from a JUnit XML report; None when it is not one
    (truncated, a bomb)."""
    try:
        root = SafeElementTree.fromstring(xml)
    except (SafeElementTree.ParseError, DefusedXmlException, ValueError):
        return None
    report = RunnerReport()
    outcomes, details = report.outcomes, report.details
    for case in root.iter("testcase"):
        failure = _collection_failure(case)
        if failure is not None:
            module, text = failure
            report.import_errors[module] = first_error_line(text)
            details[module] = text
            continue
        outcome: Outcome = "passed"
        for child in case:
            if child.tag in ("error", "failure"):
                outcome = "error" if child.tag == "error" else "failed"
                test = _junit_node_id(dict(case.attrib))
                details[test] = _failure_text(child)
                break
            if child.tag == "skipped":
                outcome = "skipped"
        test = _junit_node_id(dict(case.attrib))
        # A test that passes its call and errors in teardown appears twice: the worse outcome stands.
        if outcomes.get(test) in (None, "passed", "skipped"):
            outcomes[test] = outcome
    return report


_GO_ACTIONS: dict[str, Outcome] = {"pass": "passed", "fail": "failed", "skip": "skipped"}


def parse_go_json(output: str) -> dict[str, Outcome] | None:
    """Per-test outcomes from `go test -json`; a package that fails to build counts as one failing test."""
    outcomes: dict[str, Outcome] = {}
    for line in output.splitlines():
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(event, dict) or event.get("Action") not in _GO_ACTIONS:
            continue
        package, test = str(event.get("Package", "")), event.get("Test")
        if test:
            outcomes[f"{package}::{test}"] = _GO_ACTIONS[event["Action"]]
        elif event["Action"] == "fail" and not any(key.startswith(f"{package}::") for key in outcomes):
            outcomes[package] = "error"
    return outcomes or None


# Summary lines as runners print them, searched in the output's last lines only.
_PYTEST_SUMMARY = re.compile(r"(\d+) (passed|failed|errors?|skipped)\b")
_CARGO_SUMMARY = re.compile(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored")
_JEST_SUMMARY = re.compile(r"^Tests:\s+(.*)$", re.MULTILINE)
_JEST_PART = re.compile(r"(\d+) (passed|failed|skipped)")
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in ", re.MULTILINE)
_UNITTEST_VERDICT = re.compile(r"^(?:OK|FAILED)(?: \((.*)\))?$", re.MULTILINE)
_UNITTEST_PART = re.compile(r"(failures|errors|skipped|expected failures|unexpected successes)=(\d+)")


def _unittest_counts(tail: str) -> dict[str, int]:
    """unittest's `Ran 12 tests in 0.1s` and `FAILED (failures=1, errors=2, skipped=3)`; {} when absent."""
    ran, verdict = _UNITTEST_RAN.findall(tail), _UNITTEST_VERDICT.findall(tail)
    if not ran or not verdict:
        return {}
    parts = {name: int(number) for name, number in _UNITTEST_PART.findall(verdict[-1])}
    failed = parts.get("failures", 0) + parts.get("unexpected successes", 0)
    skipped = parts.get("skipped", 0) + parts.get("expected failures", 0)
    counts = {"failed": failed, "error": parts.get("errors", 0), "skipped": skipped}
    counts["passed"] = max(int(ran[-1]) - sum(counts.values()), 0)
    return {name: number for name, number in counts.items() if number}


def parse_counts(output: str) -> dict[str, int]:
    """Counts from the summary line a runner prints (pytest, unittest, cargo, jest/npm); {} when there is none."""
    tail = "\n".join(output.splitlines()[-40:])
    unittest = _unittest_counts(tail)
    if unittest:
        return unittest
    cargo = _CARGO_SUMMARY.findall(tail)
    if cargo:
        totals = [sum(int(match[position]) for match in cargo) for position in range(3)]
        return {name: number for name, number in zip(("passed", "failed", "skipped"), totals, strict=True) if number}
    jest = _JEST_SUMMARY.findall(tail)
    if jest:
        return {name: int(number) for number, name in _JEST_PART.findall(jest[-1])}
    for line in reversed(tail.splitlines()):
        found = _PYTEST_SUMMARY.findall(line)
        if found:
            return {("error" if name.startswith("error") else name): int(number) for number, name in found}
    return {}
