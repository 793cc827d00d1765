"""The view: a live panel on a terminal, one plain line per step in a log; per task when tasks run in parallel."""

from __future__ import annotations

import io
import os
import re
import time
from pathlib import Path

from rich.console import Console

from agent.protocol.events import (
    Baseline,
    Compaction,
    EnvironmentProgress,
    EnvironmentReady,
    GateEvent,
    GateStart,
    GenerationProgress,
    PrefillProgress,
    PrefixCacheEvent,
    Repair,
    Response,
    Retry,
    RunStart,
    TaskEnd,
    TaskServer,
    TaskStart,
    ToolCallEvent,
    ToolResultEvent,
    parse_event,
)
from agent.protocol.records import EnvironmentRecord, GateEvidence, TaskSummary
from agent.protocol.stats import RequestStats
from agent.record.json_view import JsonView
from agent.record.live import RunView

from support.cli_runs import LOCAL_AGENT, cli_command
from support.local_cli import run_local_cli, start_local_cli
from support.repos import make_repo
from support.scripted_server import Reply, ScriptedServer

BRANCH = "refactor-agent/r/1-rename"
EVENTS = [
    TaskStart(task=1, text="Rename compute_area", branch=BRANCH),
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
    ToolCallEvent(task=1, turn=1, id="call_1", name="bash", arguments='{"command": "pytest -q"}'),
    ToolResultEvent(task=1, turn=1, id="call_1", name="bash", is_error=True, text="boom\nmore"),
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
            branch=BRANCH,
            commit="0123456789abcdef",
            tests=GateEvidence(baseline="3 passed", final="3 passed"),
        ),
    ),
]
PLAIN = [
    f"task 1 started on branch {BRANCH}",
    "turn 1: 1000 prompt tokens (950 cached), 40 generated, 10/20 drafts accepted, 2.5s",
    "turn 1  bash pytest -q → error: boom",
    "model: retry 1/6 in 2.0s after HTTP 503",
    "prefix cache: saved 7650 prefix tokens (168 MiB)",
    f"task 1 verified on {BRANCH} (0123456789ab): 3 passed → 3 passed",
]


def test_plain_lines_when_not_a_terminal() -> None:
    output = io.StringIO()
    with RunView(Console(file=output, force_terminal=False, width=60)) as view:
        for event in EVENTS:
            view.handle(event)
    assert output.getvalue().splitlines() == PLAIN


# One task's story as the cron log has it: environment, start, baseline, three tool calls, gate, repair, gate, end.
STORY = [
    EnvironmentProgress(message="building the environment image"),
    EnvironmentReady(
        record=EnvironmentRecord(source="detected", description="d", image="env:1", status="built", tests_collected=4)
    ),
    TaskStart(task=1, text="Make perimeter faster", branch=BRANCH),
    GateStart(task=1, kind="baseline"),
    Baseline(task=1, ran=True, cached=False, result="4 passed"),
    ToolCallEvent(task=1, turn=1, id="a", name="read_file", arguments='{"path": "shapes/geometry.py"}'),
    ToolResultEvent(task=1, turn=1, id="a", name="read_file", is_error=False, text="def perimeter(): ..."),
    ToolCallEvent(task=1, turn=2, id="b", name="str_replace", arguments='{"path": "shapes/report.py", "old": "x"}'),
    ToolResultEvent(
        task=1,
        turn=2,
        id="b",
        name="str_replace",
        is_error=True,
        text="error: old occurs 0 times in 'shapes/report.py'; it must occur exactly once (add surrounding lines)",
    ),
    ToolCallEvent(task=1, turn=3, id="c", name="bash", arguments='{"command": "sed -i s/a/b/ shapes/geometry.py"}'),
    ToolResultEvent(task=1, turn=3, id="c", name="bash", is_error=False, text=""),
    GateStart(task=1, kind="check", tests=4),
    GateEvent(task=1, verdict="regressed", reason="1 test regressed", regressed=["t::test_perimeter"]),
    Repair(task=1, round=1, reason="1 test regressed"),
    GateEvent(task=1, verdict="regressed", reason="1 test regressed", regressed=["t::test_perimeter"]),
    TaskEnd(
        task=1,
        outcome=TaskSummary(
            index=1,
            task="Make perimeter faster",
            status="committed",
            verdict="regressed",
            reason="the model called finish; gate: 1 test regressed",
            branch=BRANCH,
            commit="65285b3adf34aaaa",
            tests=GateEvidence(
                baseline="4 passed",
                final="3 passed, 1 failed",
                regressed=["t::test_perimeter"],
                failures={"t::test_perimeter": "assert 7 == 10\nmore"},
                rounds=[1, 1],
            ),
        ),
    ),
]


def _plain(events: list) -> list[str]:
    output = io.StringIO()
    with RunView(Console(file=output, force_terminal=False, width=80)) as view:
        for event in events:
            view.handle(event)
    return output.getvalue().splitlines()


def test_the_terminal_shows_every_line_the_log_shows() -> None:
    plain = _plain(STORY)
    assert len(plain) == 11, plain
    console = Console(force_terminal=True, record=True, width=200, file=io.StringIO())
    with RunView(console) as view:
        for event in STORY:
            view.handle(event)
    screen = console.export_text()
    assert [line for line in plain if line not in screen] == []


def test_each_tool_call_is_one_line_with_its_argument_and_result() -> None:
    plain = _plain(STORY)
    assert "turn 1  read_file shapes/geometry.py → ok" in plain
    assert (
        "turn 2  str_replace shapes/report.py → error: old occurs 0 times in 'shapes/report.py'; it must occur "
        "exactly once (add surrounding lines)"
    ) in plain
    assert "turn 3  bash sed -i s/a/b/ shapes/geometry.py → ok" in plain
    hostile = ToolCallEvent(
        task=1, turn=4, id="d", name="write_file", arguments='{"path": "a\\u001b[2J' + "x" * 80 + '"}'
    )
    result = ToolResultEvent(task=1, turn=4, id="d", name="write_file", is_error=True, text="\x1b]52;c;aGk=\x07 no")
    (line,) = _plain([hostile, result])
    assert "\x1b" not in line and line.startswith("turn 4  write_file a\\x1b[2Jxxx") and "…" in line
    assert line.endswith("→ error: \\x1b]52;c;aGk=\\x07 no")


def test_a_task_end_line_starts_with_its_verdict_word() -> None:
    assert _plain(STORY)[-1] == (
        f"task 1 REGRESSED (1 test) on {BRANCH} (65285b3adf34): t::test_perimeter: assert 7 == 10; "
        "round 1: 1 regressed → round 2: 1"
    )
    failed = TaskSummary(
        index=3,
        task="Add hints",
        status="failed",
        verdict="failed",
        reason="reached --max-turns 5 without finish",
        rejected_calls={"str_replace": 4},
        last_error="old occurs 0 times",
    )
    assert _plain([TaskEnd(task=3, outcome=failed)]) == [
        "task 3 failed: reached --max-turns 5 without finish; 4 rejected tool calls (str_replace 4); "
        "last: old occurs 0 times"
    ]


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_panel_says_task_n_of_N_elapsed_left_and_now() -> None:
    start = time.mktime((2026, 12, 2, 0, 48, 30, 0, 0, -1))
    clock = _Clock(start)
    console = Console(force_terminal=True, width=100, file=io.StringIO())
    view = RunView(console, clock=clock)
    until = time.mktime((2026, 12, 2, 6, 30, 0, 0, 0, -1))
    for event in [
        RunStart(run_id="r", tasks=4, deadline_at=until),
        TaskStart(task=2, text="Make perimeter faster", branch="b"),
    ]:
        view.handle(event)
    clock.now += 18
    view.handle(PrefillProgress(task=2, processed=62_320, total=164_000))
    panel = _render(view)
    assert panel[0] == "task 2/4  0:18 elapsed  5:41:12 left (until 06:30)  Make perimeter faster"
    assert panel[1] == "now: prefill 38% of 164k tokens"
    view.handle(GenerationProgress(task=2, tokens=1204, elapsed_s=38.2))
    assert _render(view)[1] == "now: generating 1,204 tokens (38 s)"
    view.handle(EVENTS[1].model_copy(update={"task": 2, "turn": 4}))
    view.handle(GateStart(task=2, kind="check", tests=4))
    panel = _render(view)
    assert panel[1] == "now: gate: running 4 tests"
    assert panel[2] == "decode 42.0 tok/s · cache hit 95% · drafts 50% accepted · turn 4" and len(panel) == 3


def _render(view: RunView) -> list[str]:
    console = Console(width=100, file=io.StringIO(), record=True)
    console.print(view._panel())
    return console.export_text().splitlines()


def test_json_view_writes_each_event_as_one_line_parse_event_reads() -> None:
    events, errors = io.StringIO(), io.StringIO()
    view = JsonView(Console(file=events), Console(file=errors))
    with view:
        for event in STORY:
            view.handle(event)
        view.log("installation OK")
    lines = events.getvalue().splitlines()
    assert [parse_event(line) for line in lines] == STORY
    assert errors.getvalue() == "installation OK\n"
    assert view.proof.sandbox_ran and view.proof.baseline == STORY[4]


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
        PLAIN[-1],
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
    return [EVENTS[0], two, EVENTS[1], reply, EVENTS[2], EVENTS[3], EVENTS[-1], reply.model_copy(update={"turn": 2})]


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
        "[task 1] turn 1  bash pytest -q → error: boom",
        PLAIN[-1],
        "turn 2: 1000 prompt tokens (950 cached), 40 generated, 10/20 drafts accepted, 2.5s",
    ], "once task 2 is alone, its lines need no name"


def test_with_tasks_in_parallel_the_panel_shows_each_task_in_flight() -> None:
    output = io.StringIO()
    with RunView(Console(file=output, force_terminal=True, width=100)) as view:
        for event in _parallel_events()[:5]:
            view.handle(event)
        view.handle(PrefillProgress(task=2, processed=1_000, total=4_000, cached=0))
        assert view.in_flight == [1, 2]
        panel = _render(view)
    assert panel[0].startswith("task 1  0:00 elapsed") and panel[0].endswith("Rename compute_area")
    assert panel[1] == "now: tool: bash pytest -q"
    assert panel[2].startswith("task 2  ") and panel[2].endswith("Add type hints")
    assert panel[3] == "now: prefill 25% of 4,000 tokens"
    assert panel[4].startswith("decode 42.0 tok/s") and len(panel) == 5, "the tuning numbers once"


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
    assert lines[-2].startswith("task 1 verified* (0123456789ab): ")
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
    assert "task 1 verified* (0123456789ab)" in screen


def _through_a_terminal(command: list[str], scratch: Path) -> str:
    """What a person at a terminal sees of `command`: its output through a pseudo-terminal, one piece a line."""
    leader, follower = os.openpty()
    environment = {"COLUMNS": "100", "LINES": "40", "TERM": "xterm-256color"}
    try:
        process = start_local_cli(command, scratch, (follower, follower, follower), environment)
    finally:
        os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal's other side closed: the run ended
            break
        if not chunk:
            break
        seen += chunk
    process.wait(timeout=120)
    os.close(leader)
    # The panel is redrawn in place (cursor up, erase line): each such code ends what was written before it.
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r", "\n", seen.decode("utf-8", errors="replace"))


def test_a_run_in_a_terminal_prints_every_line_its_log_would(tmp_path: Path) -> None:
    """The same scripted task run twice, piped (the cron log) and in a real pseudo-terminal (the live panel): every
    line of the first, its run id and timings aside, is on the terminal too."""
    script = [
        Reply(tool_calls=[("search", {"pattern": "compute_area"})]),
        Reply(tool_calls=[("str_replace", {"path": "pkg/geometry.py", "old": "nowhere", "new": "x"})]),
        Reply(tool_calls=[("finish", {"summary": "Nothing to rename after all"})]),
    ]
    outputs = []
    for where in ("piped", "terminal"):
        repo = make_repo(tmp_path / where / "repo")
        with ScriptedServer(list(script)) as server:
            command = cli_command(repo, server, tmp_path / where / "runs", "Rename compute_area", cli=LOCAL_AGENT)
            scratch = tmp_path / where / "scratch"
            if where == "piped":
                stdout, stderr = run_local_cli(command, scratch)
                outputs.append(stdout + stderr)
            else:
                outputs.append(_through_a_terminal(command, scratch))
    piped, terminal = (
        [_masked(line, tmp_path / where) for line in output.splitlines() if line.strip()]
        for output, where in zip(outputs, ("piped", "terminal"), strict=True)
    )
    assert len(piped) >= 8 and "turn 2  str_replace pkg/geometry.py → error: " in outputs[0]
    assert [line for line in piped if line not in set(terminal)] == []
    assert any(line.startswith("now: ") for line in terminal), "the panel was shown"


def _masked(line: str, where: Path) -> str:
    """A line without what differs from run to run: its folder, the run id, timings, token counts."""
    line = re.sub(r"\d{8}-\d{6}-[0-9a-f]{4}", "RUN", line.rstrip().replace(str(where), "HERE"))
    return re.sub(r"\d", "0", line)


COMPACTION = Compaction(
    task=1,
    turn=14,
    stage="stubs",
    reason="threshold",
    tokens_before=3_512,
    tokens_after=2_341,
    threshold=3_481,
    n_ctx=4_096,
    messages=[],
)


def test_a_compaction_is_a_line_and_counted_in_the_panel() -> None:
    assert _plain([EVENTS[0], COMPACTION])[-1] == (
        "conversation compacted, turn 14: older results stubbed (past the threshold), 3,512 → 2,341 tokens "
        "(window 4,096)"
    )
    view = RunView(Console(force_terminal=True, width=120, file=io.StringIO()))
    for event in [EVENTS[0], COMPACTION, COMPACTION]:
        view.handle(event)
    assert "compactions 2" in _render(view)[-1]
