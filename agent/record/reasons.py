"""Why a task ended as it did, in one line, from its record alone: what every view says of a task that is not
verified (the live view's task end, the run's end block, report.md and report.html, `review RUN`, `review show`, the
pull-request body).

- `verdict_word(task)`: `verified`, `verified*`, `REGRESSED (1 test)`, `failed`, `no_changes`, ...;
- `reason_line(task)`: the why, without the verdict word (`task 3 failed: <reason_line>`);
- `why_line(task)`: `3 failed: <reason_line>`, the line a run's table lists under itself;
- `verdict_reason(task)`: what `review show` and the PR put after the verdict (a verified task: the gate's words).

Failed: the loop's reason with the rejected tool calls by tool and the last error; lost infrastructure (the model
server, the sandbox) says so. Regressed: the first regressed test with the first line of its failure and the
repair history. No changes: the model's own words. The model's and the repository's text in it is shown inert.
"""

from __future__ import annotations

from agent.protocol.records import TaskSummary, unmarked
from agent.safety.printable import counted, printable

# The model's words quoted in a no_changes line: its first line, cut here.
QUOTED_CHARS = 160
# A finish that changed nothing: the loop's reason for it (agent/loop.py).
FINISH_REASON = "the model called finish"
LOST = {"server": "lost the model server", "sandbox": "lost the sandbox"}


def verdict_word(task: TaskSummary) -> str:
    """The verdict as a task's end line starts: a regression says how many tests it broke, in capitals."""
    if unmarked(task.verdict) == "regressed":
        regressed = len(task.tests.regressed) if task.tests is not None else 0
        return f"REGRESSED ({counted(regressed, 'test')})"
    return task.shown_verdict


def reason_line(task: TaskSummary) -> str:
    """Why the task ended with its verdict, one printable line."""
    match unmarked(task.verdict):
        case "failed":
            line = _failed(task)
        case "regressed":
            line = _regressed(task)
        case "no_changes":
            line = _no_changes(task)
        case "verified" if task.tests is not None and task.tests.baseline and task.tests.final:
            line = f"{task.tests.baseline} → {task.tests.final}"
        case _:
            line = task.reason
    return printable(line, one_line=True)


def verdict_reason(task: TaskSummary) -> str:
    """What follows `verdict: ` where the tests are shown beside it (`review show`, the PR): the loop's and the
    gate's own words for a verified task, the reason line otherwise."""
    return printable(task.reason, one_line=True) if task.verdict == "verified" else reason_line(task)


def why_line(task: TaskSummary) -> str:
    """`3 failed: reached --max-turns 5 without finish; ...`: a task's line under a run's table."""
    return f"{task.index} {verdict_word(task)}: {reason_line(task)}"


def _first_line(text: str) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= QUOTED_CHARS else line[: QUOTED_CHARS - 1] + "…"


def _failed(task: TaskSummary) -> str:
    if task.lost is not None:
        return f"{LOST[task.lost]}: {task.reason}"
    if not task.rejected_calls:
        return task.reason
    by_tool = ", ".join(f"{name} {number}" for name, number in sorted(task.rejected_calls.items()))
    rejected = counted(sum(task.rejected_calls.values()), "rejected tool call")
    last = f"; last: {task.last_error}" if task.last_error else ""
    return f"{task.reason}; {rejected} ({by_tool}){last}"


def _regressed(task: TaskSummary) -> str:
    tests = task.tests
    if tests is None:
        return task.reason
    parts = []
    if tests.regressed:
        first = tests.regressed[0]
        failure = _first_line(tests.failures.get(first, ""))
        more = f" and {len(tests.regressed) - 1} more" if len(tests.regressed) > 1 else ""
        parts.append(f"{first}: {failure}{more}" if failure else f"{first}{more}")
    if tests.syntax_errors:
        no_longer = "no longer parses" if len(tests.syntax_errors) == 1 else "no longer parse"
        parts.append(f"{counted(len(tests.syntax_errors), 'changed file')} {no_longer}: {tests.syntax_errors[0]}")
    if len(tests.rounds) > 1:  # the repairs: what each check after one still found
        history = [
            f"round 1: {tests.rounds[0]} regressed",
            *(f"round {n}: {c}" for n, c in enumerate(tests.rounds[1:], 2)),
        ]
        parts.append(" → ".join(history))
    return "; ".join(parts) or task.reason


def _no_changes(task: TaskSummary) -> str:
    said = _first_line(task.summary)
    quote = f': "{said}"' if said else ""
    if task.capped is not None:
        return f"the reply was cut at {task.capped:,} tokens (the per-reply cap) before any tool call{quote}"
    if task.reason.startswith(FINISH_REASON):
        return f"{FINISH_REASON} without changing a file{quote}"
    return f"the model said{quote}" if said else task.reason
