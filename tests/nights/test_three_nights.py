"""The same night file, night after night: one branch per task (replaced, never stacked: one commit on its base),
merged ones retired, discarded ones left out, stale ones brought onto the new base, and a night with nothing
changed asks the model nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app

from support.nights import SCRIPTS, T1, T2, T3, T4, after_first_night, first_night, reword
from support.repos import git

STABLE = {
    T1: "refactor-agent/nightly/rename-compute-area-to-area",
    T2: "refactor-agent/nightly/add-a-perimeter-helper",
    T3: "refactor-agent/nightly/add-a-units-module",
    T4: "refactor-agent/nightly/reword-the-area-docstring",
}


@pytest.mark.started_at_collection(first_night((T1, T2, T3, T4)))
def test_night_after_night_each_task_keeps_one_branch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fixture = after_first_night(monkeypatch, (T1, T2, T3, T4))
    main_1 = git(fixture.repo, "rev-parse", "main").strip()
    assert git(fixture.repo, "rev-list", "--count", main_1).strip() == "1"  # where the night found it: the sample's

    branches = fixture.branches()
    assert sorted(branches) == sorted(STABLE.values())  # no per-run work branch left
    for branch in branches.values():
        assert git(fixture.repo, "rev-parse", f"{branch}^").strip() == main_1  # one commit on the base
    assert all(fate == "waiting" for fate in fixture.fates().values())
    assert git(fixture.repo, "log", "-1", "--format=%B", STABLE[T3]).count("Refactor-Agent-Task: nightly/t-") == 1
    run_1 = _latest_run(fixture.runs)
    (since,) = json.loads((run_1 / "summary.json").read_text())["fates"]
    assert (since["new"], since["previous_base"]) == (list(STABLE.values()), None)

    # Between nights: T1 squash-merged under its PR's title (its trailers lost), T2's branch deleted (discarded),
    # main rewrites the docstring line T4 changed (a conflict) and adds a file (no conflict for T3).
    git(fixture.repo, "merge", "--squash", "-q", STABLE[T1])
    git(fixture.repo, "commit", "-q", "-m", "Area alias (#12)")
    git(fixture.repo, "branch", "-D", STABLE[T2])
    geometry = fixture.repo / "pkg/geometry.py"
    geometry.write_text(geometry.read_text().replace("Area of a rectangle.", "Rectangle area."))
    git(fixture.repo, "commit", "-q", "-am", "Docstring")
    main_2 = git(fixture.repo, "rev-parse", "main").strip()

    runs_before, record_before = sorted(fixture.runs.iterdir()), fixture.record()
    plan = fixture.night("--plan")
    assert plan.exit_code == 0, plan.output
    assert plan.requests == []
    lines = plan.output.splitlines()
    assert lines[0] == f"{fixture.repo}: main at {main_2[:12]} (the checked-out branch; last night {main_1[:12]})"
    decisions = {line.split()[1]: line.split()[0] for line in lines[1:5]}
    assert decisions == {STABLE[T1]: "retire", STABLE[T2]: "skip", STABLE[T3]: "rebase", STABLE[T4]: "run"}
    assert "merged: the same patch is in main" in lines[1] or "merged: main holds all of its change" in lines[1]
    assert "discarded: its branch was deleted" in lines[2]
    assert lines[3].endswith(f"main moved ({main_1[:12]} → {main_2[:12]}): rebase, run the tests, no model")
    assert "main moved and conflicts with it (pkg/geometry.py)" in lines[4]
    assert lines[5] == (
        "night nightly: 1 to run with the model, 1 to rebase, 1 retired, 1 skipped; "
        "--plan: nothing ran, nothing was fetched"
    )
    assert (sorted(fixture.runs.iterdir()), fixture.record()) == (runs_before, record_before)  # nothing written

    second = fixture.night(scripts={**SCRIPTS, T4: reword("Rectangle area.")})  # the model's work on the new base
    assert second.exit_code == 0, second.output
    assert not second.asked(T1) and not second.asked(T2) and not second.asked(T3)  # T3: rebased, no model
    assert second.asked(T4)
    branches_2 = fixture.branches()
    assert sorted(branches_2) == sorted([STABLE[T1], STABLE[T3], STABLE[T4]])
    for task in (T3, T4):  # replaced, not stacked: one commit on the new base
        assert git(fixture.repo, "rev-parse", f"{STABLE[task]}^").strip() == main_2
        assert branches_2[STABLE[task]] != branches[STABLE[task]]
    rebased = git(fixture.repo, "log", "-1", "--format=%B", STABLE[T3])
    assert f"Refactor-Agent-Rebased-Onto: {main_2}" in rebased and "Refactor-Agent-Verdict: verified" in rebased
    assert "Refactor-Agent-Task: nightly/t-" in rebased
    assert set(fixture.history()) >= {
        ref for ref in fixture.history() if "/add-a-units-module/" in ref or "/reword-the-area-docstring/" in ref
    }
    assert len([ref for ref in fixture.history() if "/add-a-units-module/" in ref]) == 2  # night 1's tip is kept
    history_2 = fixture.history()
    fates = fixture.fates()
    assert (fates[T1], fates[T2], fates[T3], fates[T4]) == ("merged", "discarded", "waiting", "waiting")
    record = fixture.record()
    assert {task["text"]: task["merged_by"] for task in record["tasks"].values()}[T1] in ("patch_id", "contained")
    assert {task["text"]: task["nights_open"] for task in record["tasks"].values()} == {T1: 1, T2: 1, T3: 2, T4: 2}

    # The morning report's "since last night", from the record and the night's plan.
    run_2 = _latest_run(fixture.runs)
    (since,) = json.loads((run_2 / "summary.json").read_text())["fates"]
    assert (since["base"], since["previous_base"]) == (main_2, main_1)
    assert since["rebased"] == [STABLE[T3]] and since["updated"] == [STABLE[T4]]
    assert since["retired"] == [STABLE[T1]] and since["discarded"] == [STABLE[T2]]
    assert since["new"] == since["unchanged"] == [] and since["failing"] == {}
    kinds = {kind["kind"]: kind for kind in since["kinds"]}
    assert kinds["rename"] == {"kind": "rename", "merged": 1, "discarded": 0, "waiting": 0, "merge_rate": 1.0}
    assert (kinds["other"]["discarded"], kinds["other"]["waiting"], kinds["other"]["merge_rate"]) == (1, 1, 0.0)
    report = (run_2 / "report.md").read_text()
    assert f"**since last night: {fixture.repo}: main at {main_2[:12]} (last night {main_1[:12]})**" in report
    assert f"- rebased: {STABLE[T3]}" in report and f"- retired (merged): {STABLE[T1]}" in report
    assert f"- discarded: {STABLE[T2]}" in report
    assert "- kind rename: 1 merged, 0 discarded, 0 waiting; merge rate 100%" in report
    assert "- kind other: 0 merged, 1 discarded, 1 waiting; merge rate 0%" in report
    assert (
        "retired (merged): refactor-agent/nightly/rename-compute-area-to-area</li>"
        in (run_2 / "report.html").read_text()
    )

    # review fates: the record's table and the merge rate per kind, from inside the repository.
    monkeypatch.chdir(fixture.repo)
    table = json.loads(_review("fates", "--json", "--runs-dir", str(fixture.runs)))
    assert {row["branch"]: row["fate"] for row in table["tasks"]} == {
        STABLE[T1]: "merged",
        STABLE[T2]: "discarded",
        STABLE[T3]: "waiting",
        STABLE[T4]: "waiting",
    }
    assert {row["kind"]: row["merge_rate"] for row in table["kinds"]} == {"rename": 1.0, "other": 0.0, "docs": None}
    assert table["nights"] == ["nightly"]
    text = _review("fates", "--runs-dir", str(fixture.runs)).splitlines()
    assert any(line.split() == [STABLE[T3], "other", "waiting", "2"] for line in text)
    assert "  other: 0 merged, 1 discarded, 1 waiting; merge rate 0%" in text
    shown = _review(run_2.name, "--runs-dir", str(fixture.runs)).splitlines()
    assert f"  rebased: {STABLE[T3]}" in shown and "branches now:" in shown
    assert [line.split() for line in shown[shown.index("branches now:") + 1 :]] == [
        [STABLE[T3], "present"],
        [STABLE[T4], "present"],
    ]
    # Night 1's run the morning after night 2: T1's branch is still there, squash-merged (the night retired it).
    shown = _review(run_1.name, "--runs-dir", str(fixture.runs)).splitlines()
    assert [line.split(maxsplit=1) for line in shown[shown.index("branches now:") + 1 :]] == [
        [STABLE[T1], "merged"],
        [STABLE[T2], "deleted"],
        [STABLE[T3], "moved by a later night's rebase"],
        [STABLE[T4], "replaced by a later night's result"],
    ]

    notified = tmp_path / "notified"
    third = fixture.night("--keep-history", "1", "--on-finish", f"touch {notified}")
    assert third.exit_code == 0, third.output
    assert third.requests == []
    assert fixture.branches() == branches_2
    # A night with nothing to run ends as any night: its report, what to review, the user's notification.
    end = third.output.splitlines()
    run_3 = _latest_run(fixture.runs)
    assert f"run {run_3.name}: nothing to run tonight" in end
    assert f"report: {(run_3 / 'report.html').absolute().as_uri()}" in end
    assert any(line.startswith(f"next: refactor-agent review {run_3.name}") for line in end)
    assert notified.exists()
    summary_3 = json.loads((_latest_run(fixture.runs) / "summary.json").read_text())
    (since,) = summary_3["fates"]
    assert since["unchanged"] == [STABLE[T3], STABLE[T4]]
    assert since["retired"] == since["discarded"] == []  # said the night it happened, not every night after
    assert [kind["merge_rate"] for kind in since["kinds"]] == [1.0, 0.0, None]
    # The night's gc removed night 1's history refs of the two tasks night 2 replaced, and the report says so.
    assert [line.split(": ")[0] for line in summary_3["removed"][:-1]] == [
        f"removed history ref {ref} in {fixture.repo}" for ref in sorted(set(history_2) - set(fixture.history()))
    ]
    assert len(summary_3["removed"]) == 3 and summary_3["removed"][-1] == "gc: removed 2 history refs"
    report_3 = (_latest_run(fixture.runs) / "report.md").read_text()
    assert "## Removed at the night's end (gc)" in report_3 and "- gc: removed 2 history refs" in report_3


def _latest_run(runs: Path) -> Path:
    return sorted(path for path in runs.iterdir() if not path.name.startswith("."))[-1]


def _review(*arguments: str) -> str:
    result = CliRunner().invoke(app, ["review", *arguments])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


@pytest.mark.started_at_collection(first_night((T3,)))
def test_a_stale_task_that_regresses_on_the_new_base_is_done_again_by_the_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fixture = after_first_night(monkeypatch, (T3,))
    # main gains a test that the units module breaks: the rebase applies cleanly and regresses that test.
    (fixture.repo / "tests/test_no_units.py").write_text(
        "import pathlib\n\n\ndef test_no_units():\n    assert not pathlib.Path('pkg/units.py').exists()\n"
    )
    git(fixture.repo, "add", ".")
    git(fixture.repo, "commit", "-q", "-m", "No units")
    second = fixture.night(tasks=(T3,))
    assert "rebase  " + STABLE[T3] in second.output  # planned as a rebase ...
    assert second.asked(T3)  # ... which regressed: the model did it again on the new base
    assert git(fixture.repo, "rev-parse", f"{STABLE[T3]}^").strip() == git(fixture.repo, "rev-parse", "main").strip()
