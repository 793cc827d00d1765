"""One night file per night name on a repository: a second file naming the same night there is refused in one line
naming both, exit 2, nothing written (not even by `--plan`); the night file moved or renamed takes its name with
it, and one line says so."""

from __future__ import annotations

import pytest

from support.nights import T3, after_first_night, first_night


@pytest.mark.started_at_collection(first_night((T3,)))
def test_a_second_night_file_with_the_same_name_is_refused_and_a_moved_one_takes_it_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fixture = after_first_night(monkeypatch, (T3,))
    first_file = fixture.night_file
    assert fixture.record()["nights"] == {"nightly": str(first_file)}

    fixture.night_file = fixture.root / "copy.toml"  # the same name = "nightly", the same repository
    runs, record, branches = sorted(fixture.runs.iterdir()), fixture.record(), fixture.branches()
    for options in ((), ("--plan",)):
        second = fixture.night(*options, tasks=(T3,))
        assert second.exit_code == 2, second.output
        assert second.output == (
            f"error: {fixture.night_file}: night 'nightly' on {fixture.repo} is {first_file}'s: one night file per "
            'night name (give one of them another name = "...")\n'
        )
        assert second.requests == []
        assert (sorted(fixture.runs.iterdir()), fixture.record(), fixture.branches()) == (runs, record, branches)

    fixture.night_file.unlink()
    moved = fixture.night_file = fixture.root / "moved" / "nightly.toml"
    moved.parent.mkdir()
    first_file.rename(moved)
    again = fixture.night(tasks=(T3,))
    assert again.exit_code == 0, again.output
    assert (
        f"night 'nightly' on {fixture.repo} was {first_file}'s, which no longer names it there: it is {moved}'s now"
        in again.output
    )
    assert fixture.record()["nights"] == {"nightly": str(moved)}
