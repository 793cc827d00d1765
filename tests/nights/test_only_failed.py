"""`night --only failed` runs only the tasks that failed last night (the others are skipped, their branches left
as they are, even with the base moved); `--retry discarded` runs a discarded one again."""

from __future__ import annotations

import pytest

from support.nights import SCRIPTS, T2, T3, NightState
from support.repos import git
from support.scripted_server import Fail

UNITS, PERIMETER = "refactor-agent/nightly/add-a-units-module", "refactor-agent/nightly/add-a-perimeter-helper"
# A first night whose second task's server breaks.
BROKEN = NightState(tasks=(T3, T2), scripts={**SCRIPTS, T2: [Fail(500, {"error": {"message": "the server broke"}})]})


@pytest.mark.started_at_collection(BROKEN)
def test_only_the_failed_task_runs_and_a_discarded_one_only_when_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    fixture, (first,) = BROKEN.made(monkeypatch)
    assert first.asked(T2), first.output
    assert sorted(fixture.branches()) == [UNITS]  # the failed task left no branch
    assert fixture.fates() == {T3: "waiting", T2: "failing"}
    units = fixture.branches()[UNITS]
    (fixture.repo / "NEWS").write_text("main moved\n")
    git(fixture.repo, "add", ".")
    git(fixture.repo, "commit", "-q", "-m", "News")

    second = fixture.night("--only", "failed", tasks=(T3, T2))
    assert second.exit_code == 0, second.output
    assert "not failed last night (--only failed)" in second.output
    assert second.asked(T2) and not second.asked(T3)
    assert fixture.branches() == {UNITS: units, PERIMETER: fixture.branches()[PERIMETER]}
    assert fixture.fates() == {T3: "waiting", T2: "waiting"}

    git(fixture.repo, "branch", "-D", PERIMETER)  # discarded
    third = fixture.night("--only", "failed", tasks=(T3, T2))
    assert third.requests == [] and PERIMETER not in fixture.branches()
    retried = fixture.night("--retry", "discarded", tasks=(T2,))
    assert retried.exit_code == 0, retried.output
    assert "discarded; --retry discarded" in retried.output and retried.asked(T2)
    assert PERIMETER in fixture.branches()
