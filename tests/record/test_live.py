"""The view: a live panel on a terminal, one plain line per step in a log; per task when tasks run in parallel."""

from __future__ import annotations

import io

from rich.console import Console

from agent.protocol.events import (
    Baseline,
    EnvironmentProgress,
    EnvironmentReady,
    GateEvent,
    PrefillProgress,
    PrefixCacheEvent,
    Repair,
    Response,
    Retry,
    TaskEnd,
    TaskServer,
    TaskStart,
    ToolResultEvent,
)
from agent.protocol.records import EnvironmentRecord, GateEvidence, TaskSummary
from agent.protocol.stats import RequestStats
from agent.record.live import RunView

EVENTS = [
    TaskStart(task=1, text="Rename compute_area", branch="refactor-agent/r/1-rename"),
    Response(
        task=1,
        turn=1,
        message={"role": "assistant", "content": ""},
        stats=RequestStats(
            prompt_tokens=1000,
            cached_tokens=950,
            completion_tokens=40,
            draft_tokens=20,
            draft_accepted=10,
            predicted_per_second=42.0,
            latency_s=2.5,
        ),
    ),
    ToolResultEvent(task=1, turn=1, id="call_1", name="bash", is_error=True, text="boom"),
    Retry(task=1, message="retry 1/6 in 2.0s after HTTP 503"),
    PrefixCacheEvent(task=1, action="saved", tokens=7650, ms=44.0, message="saved 7650 prefix tokens (168 MiB)"),
    TaskEnd(
        task=1,
        outcome=TaskSummary(
            index=1,
            task="Rename compute_area",
            status="committed",
            verdict="verified",
            reason="the model called finish",
        ),
    ),
]


def test_plain_lines_when_not_a_terminal() -> None:
    output = io.StringIO()
    with RunView(Console(file=output, force_terminal=False, width=60)) as view:
        for event in EVENTS:
            view.handle(event)
    assert output.getvalue().splitlines() == [
        "task 1 started on branch refactor-agent/r/1-rename",
        "turn 1: 1000 prompt tokens (950 cached), 40 generated, 10/20 drafts accepted, 2.5s",
        "turn 1: bash (error)",
        "model: retry 1/6 in 2.0s after HTTP 503",
        "prefix cache: saved 7650 prefix tokens (168 MiB)",
        "task 1 committed, verified: the model called finish",
    ]


def test_live_panel_on_a_terminal_shows_speed_cache_and_drafts() -> None:
    output = io.StringIO()
    with RunView(Console(file=output, force_terminal=True, width=80)) as view:
        for event in EVENTS:
            view.handle(event)
    screen = output.getvalue()
    assert "42.0" in screen and "95%" in screen and "50%" in screen and "bash (error)" in screen


PREFILL = [
    TaskStart(task=1, text="Rename compute_area", branch="refactor-agent/r/1-rename"),
    PrefillProgress(task=1, processed=120_000, total=480_000, cached=0),
]


def test_live_panel_shows_prefill_progress_as_a_bar() -> None:
    output = io.StringIO()
    with RunView(Console(file=output, force_terminal=True, width=100)) as view:
        for event in PREFILL:
            view.handle(event)
    screen = output.getvalue()
    assert "120,000 / 480,000 prompt tokens" in screen
    assert "━" in screen  # rich's bar


def test_the_prefill_bar_goes_when_the_response_arrives() -> None:
    output = io.StringIO()
    with RunView(Console(file=output, force_terminal=True, width=100)) as view:
        for event in [*PREFILL, EVENTS[1]]:
            view.handle(event)
    assert view.tasks[1]["prefill"] is None


def test_plain_output_does_not_log_prefill_progress() -> None:
    output = io.StringIO()
    with RunView(Console(file=output, force_terminal=False, width=60)) as view:
        for event in PREFILL:
            view.handle(event)
    assert output.getvalue().splitlines() == ["task 1 started on branch refactor-agent/r/1-rename"]


class ClosedPipe(io.StringIO):
    """stdout after `| head -1` has exited: writes go into the buffer, the flush that would send them fails."""

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_output_to_a_closed_pipe_goes_on_in_the_log_file(tmp_path) -> None:
    out, err = ClosedPipe(), ClosedPipe()
    view = RunView(Console(file=out, force_terminal=False, width=60), Console(file=err, force_terminal=False))
    view.log("preflight: server ready")  # before the run directory exists
    view.divert_to(tmp_path / "output.log")
    view.handle(EVENTS[-1])
    view.error("the sandbox image is missing")
    assert (tmp_path / "output.log").read_text().splitlines() == [
        "preflight: server ready",
        "task 1 committed, verified: the model called finish",
        "error: the sandbox image is missing",
    ]


def test_plain_output_says_which_server_of_a_fleet_a_task_went_to() -> None:
    output = io.StringIO()
    with RunView(Console(file=output, force_terminal=False, width=200)) as view:
        view.handle(TaskServer(task=2, server="http://gpu2:8080/v1", reason="failover: http://gpu1:8080/v1 died"))
    assert "task 2 on http://gpu2:8080/v1: failover: http://gpu1:8080/v1 died" in output.getvalue()


def _parallel_events() -> list:
    two = TaskStart(task=2, text="Add type hints", branch="refactor-agent/r/2-hints")
    reply = EVENTS[1].model_copy(update={"task": 2})
    return [EVENTS[0], two, EVENTS[1], reply, EVENTS[2], EVENTS[-1], reply.model_copy(update={"turn": 2})]


def test_with_tasks_in_parallel_each_plain_line_says_its_task() -> None:
    output = io.StringIO()
    with RunView(Console(file=output, force_terminal=False, width=120)) as view:
        for event in _parallel_events():
            view.handle(event)
    assert output.getvalue().splitlines() == [
        "task 1 started on branch refactor-agent/r/1-rename",
        "task 2 started on branch refactor-agent/r/2-hints",
        "[task 1] turn 1: 1000 prompt tokens (950 cached), 40 generated, 10/20 drafts accepted, 2.5s",
        "[task 2] turn 1: 1000 prompt tokens (950 cached), 40 generated, 10/20 drafts accepted, 2.5s",
        "[task 1] turn 1: bash (error)",
        "task 1 committed, verified: the model called finish",
        "turn 2: 1000 prompt tokens (950 cached), 40 generated, 10/20 drafts accepted, 2.5s",
    ], "once task 2 is alone, its lines need no name"


def test_with_tasks_in_parallel_the_panel_shows_each_task_in_flight() -> None:
    output = io.StringIO()
    with RunView(Console(file=output, force_terminal=True, width=100)) as view:
        for event in _parallel_events()[:5]:
            view.handle(event)
        view.handle(PrefillProgress(task=2, processed=1_000, total=4_000, cached=0))
        assert view.in_flight == [1, 2]
        assert view.tasks[1]["tool"] == "bash (error)" and view.tasks[2]["tool"] == "-"
        assert view.tasks[2]["prefill"] == (1_000, 4_000) and view.tasks[1]["prefill"] is None
    screen = output.getvalue()
    assert "1: Rename compute_area" in screen and "2: Add type hints" in screen


# A repository's own test output, as the baseline reports its last line: colours (pytest's --color=yes), a
# terminal title (OSC) and what rich would read as markup.
HOSTILE = "did not run: \x1b]0;owned\x07\x1b[31m6 errors\x1b[0m in 2.38s [/tmp] [link=http://example.com]x"


def test_repository_text_cannot_drive_the_terminal_in_plain_lines() -> None:
    output = io.StringIO()
    with RunView(Console(file=output, force_terminal=False, width=200)) as view:
        view.handle(Baseline(task=1, ran=False, cached=False, result=HOSTILE))
    line = output.getvalue()
    assert "\x1b" not in line
    assert "\\x1b]0;owned\\x07\\x1b[31m6 errors\\x1b[0m in 2.38s [/tmp] [link=http://example.com]x" in line


def test_live_panel_shows_repository_text_as_is_and_inert() -> None:
    output = io.StringIO()
    ended = TaskEnd(
        task=1,
        outcome=TaskSummary(index=1, task="Rename [/x] area", status="failed", verdict="unverified", reason=HOSTILE),
    )
    with RunView(Console(file=output, force_terminal=True, width=300)) as view:
        view.handle(TaskStart(task=1, text="Rename [/x] area", branch="refactor-agent/r/1-rename"))
        view.handle(ended)
    screen = output.getvalue()
    assert "Rename [/x] area" in screen and "[link=http://example.com]x" in screen
    assert "\x1b]" not in screen and "\x07" not in screen and "\\x1b[31m6 errors" in screen


# What a repository's tests, its build, a server or the model can print: an OSC 52 clipboard write, a screen clear,
# a bidi override, and rich markup that closes nothing.
CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4=\x07"
CLEAR = "\x1b[2J\x1b[H"
EVERY_ESCAPE = f"out {CLIPBOARD}{CLEAR}\u202e [/] [bold]x"
EVERY_ESCAPE_SHOWN = "out \\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2J\\x1b[H\\u202e [/] [bold]x"


def _hostile_events() -> list:
    """Every event whose line carries someone else's text, each carrying EVERY_ESCAPE."""
    failed_build = EnvironmentRecord(
        source="devcontainer", description="d", image="img", status="failed", error=EVERY_ESCAPE, log="/runs/env.log"
    )
    outcome = TaskSummary(
        index=1,
        task=EVERY_ESCAPE,
        status="committed",
        verdict="verified",
        reason=EVERY_ESCAPE,
        commit="0123456789abcdef",
        tests=GateEvidence(test_infrastructure=["conftest.py"]),
    )
    return [
        EnvironmentProgress(message=EVERY_ESCAPE),
        EnvironmentReady(record=failed_build),
        TaskStart(task=1, text=EVERY_ESCAPE, branch="refactor-agent/r/1-x"),
        TaskServer(task=1, server="http://gpu1:8080/v1", reason=EVERY_ESCAPE),
        Retry(task=1, message=EVERY_ESCAPE),
        PrefixCacheEvent(task=1, action="warning", message=EVERY_ESCAPE),
        Baseline(task=1, ran=False, cached=False, result=f"did not run: {EVERY_ESCAPE}"),
        GateEvent(task=1, verdict="regressed", reason=EVERY_ESCAPE),
        Repair(task=1, round=1, reason=EVERY_ESCAPE),
        GateEvent(task=1, verdict="verified", reason=EVERY_ESCAPE, test_infrastructure=["conftest.py"]),
        TaskEnd(task=1, outcome=outcome),
    ]


def test_escape_sequences_and_markup_in_plain_lines_are_shown_as_text() -> None:
    output, errors = io.StringIO(), io.StringIO()
    view = RunView(Console(file=output, force_terminal=False, width=60), Console(file=errors, force_terminal=False))
    with view:
        for event in _hostile_events():
            view.handle(event)
        view.log(f"preflight: {EVERY_ESCAPE}")
    view.error(EVERY_ESCAPE)
    lines = output.getvalue().splitlines()
    assert "\x1b" not in output.getvalue() + errors.getvalue() and "\u202e" not in output.getvalue()
    assert len(lines) == 12 and [line for line in lines if EVERY_ESCAPE_SHOWN not in line] == [
        "task 1 started on branch refactor-agent/r/1-x"  # its text is the live panel's
    ]
    assert f"gate: verified*, {EVERY_ESCAPE_SHOWN}" in lines
    assert lines[-2].startswith("task 1 committed, verified* (0123456789ab): ")
    assert errors.getvalue() == f"error: {EVERY_ESCAPE_SHOWN}\n"


def test_escape_sequences_and_markup_in_the_live_panel_are_shown_as_text() -> None:
    output = io.StringIO()
    with RunView(Console(file=output, force_terminal=True, width=400)) as view:
        for event in _hostile_events():
            view.handle(event)
        view.log(f"task 1 committed: {EVERY_ESCAPE}")  # what the run prints after the panel, per task
    screen = output.getvalue()
    assert CLIPBOARD not in screen and "\x1b]52" not in screen and "\x1b[2J" not in screen
    assert "[/] [bold]x" in screen and "\\x1b]52;c;" in screen
    assert "committed, verified*" in screen
