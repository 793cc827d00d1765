"""Run ids: the newest run is the last by name, which resume, supersede and review read as the newest."""

from __future__ import annotations

import time
from pathlib import Path
from unittest import mock

from agent.record import journal
from agent.record.journal import new_run_id, run_directories


def test_runs_started_within_one_second_sort_in_the_order_they_started(tmp_path: Path) -> None:
    """A night shorter than a second, then the next: a random suffix put the second before the first half the
    time (a resume test then resumed the finished night)."""
    frozen = time.strftime("%Y%m%d-%H%M%S")
    made = []
    with mock.patch.object(journal.time, "strftime", return_value=frozen):
        for _ in range(40):
            run_id = new_run_id(tmp_path)
            (tmp_path / run_id).mkdir()
            made.append(run_id)
    assert [path.name for path in run_directories(tmp_path)] == made
    assert len(set(made)) == 40


def test_a_second_whose_suffixes_are_used_up_is_waited_out(tmp_path: Path) -> None:
    (tmp_path / "20261202-030000-ffff").mkdir()
    (tmp_path / "20261202-030000-notarun").mkdir()  # not a run id: ignored
    seconds = iter(["20261202-030000", "20261202-030001"])
    with (
        mock.patch.object(journal.time, "strftime", side_effect=lambda _format: next(seconds)),
        mock.patch.object(journal.time, "sleep") as slept,
    ):
        run_id = new_run_id(tmp_path)
    assert run_id.startswith("20261202-030001-") and slept.call_count == 1
