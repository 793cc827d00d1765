"""The transcript's and summary.json's schema: records written by an older version still parse."""

from __future__ import annotations

import json

from agent.protocol.config import RunConfig
from agent.protocol.events import GateStart, GenerationProgress, RunStart, TaskEnd, parse_event
from agent.protocol.records import RunSummary

# Lines as a run before issue 23 wrote them: no served model, no deadline, no rejected calls, failures or rounds.
OLD_RUN_START = json.dumps(
    {"time": 1764630000.0, "task": None, "type": "run_start", "run_id": "20261201-232754-24b5", "tasks": 2}
)
OLD_TASK_END = json.dumps(
    {
        "time": 1764630100.5,
        "task": 2,
        "type": "task_end",
        "outcome": {
            "index": 2,
            "task": "Make perimeter faster",
            "repo": "/tmp/repo",
            "status": "committed",
            "verdict": "regressed",
            "reason": "the model called finish; gate: 1 test(s) regressed",
            "branch": "refactor-agent/20261201-232754-24b5/2-make-perimeter-faster",
            "base_commit": "b1451e7546",
            "commit": "65285b3adf34",
            "summary": "Still fine.",
            "turns": 4,
            "wall_time_s": 18.2,
            "tests": {
                "baseline": "3 passed",
                "final": "2 passed, 1 failed",
                "regressed": ["tests/test_geometry.py::test_perimeter"],
                "repair_rounds": 2,
            },
            "warnings": [],
        },
    }
)
OLD_SUMMARY = {
    "run_id": "20261201-232754-24b5",
    "repo": "/tmp/repo",
    "model": "deepseek-v4-flash",
    "server_url": "http://127.0.0.1:8080/v1",
    "status": "completed",
    "tasks": [json.loads(OLD_TASK_END)["outcome"]],
}


def test_a_transcript_written_before_issue_23_still_parses() -> None:
    start = parse_event(OLD_RUN_START)
    assert isinstance(start, RunStart)
    assert start.deadline_at is None and start.served_model is None
    end = parse_event(OLD_TASK_END)
    assert isinstance(end, TaskEnd)
    outcome = end.outcome
    assert outcome.rejected_calls == {} and outcome.last_error == ""
    assert outcome.lost is None and outcome.capped is None and outcome.model is None
    assert outcome.tests is not None and outcome.tests.failures == {} and outcome.tests.rounds == []
    summary = RunSummary.model_validate(OLD_SUMMARY)
    assert summary.model == "deepseek-v4-flash" and summary.served_model is None
    assert RunConfig(repo=".", tasks=["x"]).author == "refactor-agent ({model}) <refactor-agent@localhost>"


def test_the_new_events_round_trip_through_a_transcript_line() -> None:
    for event in (GenerationProgress(task=1, tokens=1204, elapsed_s=38.0), GateStart(task=1, kind="check", tests=4)):
        assert parse_event(event.model_dump_json()) == event
