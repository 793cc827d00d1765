"""Every task that is not verified says why in one line: the verdict word, then the reason from the task's record."""

from __future__ import annotations

import pytest

from agent.protocol.records import GateEvidence, TaskSummary
from agent.record.reasons import reason_line, verdict_word, why_line

PERIMETER = "tests/test_geometry.py::test_perimeter"


def _task(**fields: object) -> TaskSummary:
    base: dict[str, object] = {"index": 3, "task": "Make perimeter faster", "status": "committed", "reason": ""}
    return TaskSummary.model_validate({**base, **fields})


CASES = {
    "failed": (
        _task(
            status="failed",
            verdict="failed",
            reason="reached --max-turns 5 without finish",
            rejected_calls={"str_replace": 4, "view_file": 1},
            last_error="old occurs 0 times in 'shapes/report.py'; it must occur exactly once (add surrounding lines)",
        ),
        "failed",
        "reached --max-turns 5 without finish; 5 rejected tool calls (str_replace 4, view_file 1); "
        "last: old occurs 0 times in 'shapes/report.py'; it must occur exactly once (add surrounding lines)",
    ),
    "failed without rejected calls": (
        _task(status="failed", verdict="failed", reason="reached --max-turns 5 without finish"),
        "failed",
        "reached --max-turns 5 without finish",
    ),
    "regressed": (
        _task(
            verdict="regressed",
            reason="the model called finish; gate: 1 test regressed",
            tests=GateEvidence(
                regressed=[PERIMETER],
                failures={PERIMETER: "assert 7 == 10\n+  where 7 = perimeter(2, 3)"},
                rounds=[2, 1, 1],
                repair_rounds=2,
            ),
        ),
        "REGRESSED (1 test)",
        f"{PERIMETER}: assert 7 == 10; round 1: 2 regressed → round 2: 1 → round 3: 1",
    ),
    "regressed, several": (
        _task(
            verdict="regressed",
            reason="gate: 3 tests regressed",
            tests=GateEvidence(regressed=[PERIMETER, "tests/test_a.py::t", "tests/test_b.py::t"], rounds=[3]),
        ),
        "REGRESSED (3 tests)",
        f"{PERIMETER} and 2 more",
    ),
    "regressed by a syntax error": (
        _task(verdict="regressed", reason="gate: no test regressed", tests=GateEvidence(syntax_errors=["a.py:3: x"])),
        "REGRESSED (0 tests)",
        "1 changed file no longer parses: a.py:3: x",
    ),
    "unverified": (
        _task(verdict="unverified", reason="the model called finish; gate: no test command found"),
        "unverified",
        "the model called finish; gate: no test command found",
    ),
    "no_changes": (
        _task(
            status="no_changes",
            verdict="no_changes",
            reason="the model answered without calling a tool",
            summary="\nThe module is already documented well enough; I see nothing to change.\nMore.",
        ),
        "no_changes",
        'the model said: "The module is already documented well enough; I see nothing to change."',
    ),
    "capped": (
        _task(
            status="no_changes",
            verdict="no_changes",
            reason="the reply was cut at max_tokens without a tool call",
            summary="```python def compute_area(): ...",
            capped=192,
        ),
        "no_changes",
        'the reply was cut at 192 tokens (the per-reply cap) before any tool call: "```python def compute_area(): ..."',
    ),
    "finish without a change": (
        _task(status="no_changes", verdict="no_changes", reason="the model called finish", summary="Renamed it."),
        "no_changes",
        'the model called finish without changing a file: "Renamed it."',
    ),
    "lost the server": (
        _task(
            status="failed",
            verdict="failed",
            reason="model server failed 2 times, last: APIConnectionError: Connection error.",
            lost="server",
            rejected_calls={"bash": 1},
        ),
        "failed",
        "lost the model server: model server failed 2 times, last: APIConnectionError: Connection error.",
    ),
    "lost the sandbox": (
        _task(status="failed", verdict="failed", reason="sandbox ra-1: it vanished", lost="sandbox"),
        "failed",
        "lost the sandbox: sandbox ra-1: it vanished",
    ),
    "timed_out": (
        _task(status="timed_out", verdict="timed_out", reason="the night's deadline: stopped at 06:30"),
        "timed_out",
        "the night's deadline: stopped at 06:30",
    ),
}


@pytest.mark.parametrize(("task", "word", "line"), CASES.values(), ids=CASES.keys())
def test_reason_lines_of_each_verdict(task: TaskSummary, word: str, line: str) -> None:
    assert verdict_word(task) == word
    assert reason_line(task) == line
    assert why_line(task) == f"{task.index} {word}: {line}"


def test_a_reason_line_is_one_printable_line_whatever_the_model_wrote() -> None:
    hostile = _task(
        status="no_changes",
        verdict="no_changes",
        reason="the model answered\nwithout calling a tool",
        summary="\x1b]52;c;ZXZpbA==\x07 clipboard\u202e" + "x" * 500,
    )
    line = reason_line(hostile)
    assert "\n" not in line and "\x1b" not in line and "\u202e" not in line
    assert "\\x1b]52" in line and len(line) < 220
    failed = _task(
        status="failed", verdict="failed", reason="stop\x1b[2J", last_error="e\x1b[2J", rejected_calls={"b": 1}
    )
    assert "\x1b" not in reason_line(failed)
