"""Per-test outcomes from the verbose output of unittest and of runners built on it (Django's `runtests.py -v 2`,
`manage.py test -v 2`): one `test_x (module.Class.test_x) ... ok` line per test, then a block per failure.

The output was printed inside the sandbox by the repository's own code: hostile text, read with anchored regular
expressions line by line, never executed. A test's own prints may land between its name and its result, so a
result alone on a later line still counts for the test named last.
"""

from __future__ import annotations

import re

from agent.gate.results import MAX_DETAIL_CHARS, Outcome, RunnerReport, first_error_line

# `test_x (pkg.module.Class.test_x)` (Python 3.11+) or `test_x (pkg.module.Class)`, a subtest's `[...]`/`(i=1)` after.
_HEADER = re.compile(r"^(?P<indent>\s*)(?P<name>[\w.]+) \((?P<where>[\w.]+)\)(?P<rest>.*)$")
_STATUS = re.compile(r"(?:^|\s\.\.\.\s?)(ok|FAIL|ERROR|skipped\b.*|expected failure|unexpected success)$")
_BLOCK = re.compile(r"^(?:ERROR|FAIL|UNEXPECTED SUCCESS): ([\w.]+) \(([\w.]+)\)")
_RULE = re.compile(r"^(?:=+|-+)$")
_OUTCOMES: dict[str, Outcome] = {
    "ok": "passed",
    "FAIL": "failed",
    "ERROR": "error",
    "expected failure": "skipped",
    "unexpected success": "failed",
}
# The loader's stand-in for a module that failed to import: its test name is the module's.
FAILED_IMPORT = "unittest.loader._FailedTest"
_WORSE: tuple[Outcome, ...] = ("skipped", "passed", "failed", "error")


def _test_id(name: str, where: str) -> str:
    return where if where.endswith(f".{name}") else f"{where}.{name}"


def _outcome(status: str) -> Outcome:
    return "skipped" if status.startswith("skipped") else _OUTCOMES[status]


def _record(outcomes: dict[str, Outcome], test: str, outcome: Outcome) -> None:
    """A test with subtests reports once per failing subtest: the worst outcome stands."""
    known = outcomes.get(test)
    if known is None or _WORSE.index(outcome) > _WORSE.index(known):
        outcomes[test] = outcome


def _blocks(lines: list[str]) -> dict[str, str]:
    """Each failure block's text by test id: from the rule under its header to the next `=` rule (or the rule
    above "Ran N tests"); a test with several failing subtests has several blocks, joined."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for number, line in enumerate(lines):
        header = _BLOCK.match(line)
        following = lines[number + 1] if number + 1 < len(lines) else ""
        if header:
            current = blocks.setdefault(_test_id(header.group(1), header.group(2)), [])
        elif line.startswith("=" * 10) or (line.startswith("-" * 10) and following.startswith("Ran ")):
            current = None
        elif current is not None and not (_RULE.match(line) and (not current or current[-1] == "")):
            current.append(line)
    return {test: "\n".join(text).strip()[:MAX_DETAIL_CHARS] for test, text in blocks.items()}


def parse_unittest(output: str) -> RunnerReport | None:
    """Outcomes, failure texts and unimportable modules; None when the output names no test."""
    lines = output.splitlines()
    report = RunnerReport()
    pending: str | None = None
    for line in lines:
        header = _HEADER.match(line)
        status = _STATUS.search(line)
        if header:
            test = _test_id(header.group("name"), header.group("where"))
            if not header.group("indent"):
                pending = test
            if status:
                _record(report.outcomes, test, _outcome(status.group(1)))
                pending = None if not header.group("indent") else pending
        elif pending is not None and status:
            _record(report.outcomes, pending, _outcome(status.group(1)))
            pending = None
    if not report.outcomes:
        return None
    details = _blocks(lines)
    for test in [test for test in report.outcomes if test.startswith(f"{FAILED_IMPORT}.")]:
        module = test.removeprefix(f"{FAILED_IMPORT}.")
        del report.outcomes[test]
        report.import_errors[module] = first_error_line(details.get(test, ""))
        report.details[module] = details.get(test, "")
    report.details.update({test: text for test, text in details.items() if test in report.outcomes})
    return report
