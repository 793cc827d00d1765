"""The runs directory as review reads it, without Docker: the settings a run used for each of its repositories."""

from __future__ import annotations

from pathlib import Path

from agent.protocol.config import NightConfig, RunConfig
from agent.protocol.records import RunSummary
from agent.review.records import RunRecord


def test_a_night_of_two_repositories_gives_each_its_own_settings(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    configs = [
        RunConfig(repo=first, tasks=["a"], test_cmd="make check"),
        RunConfig(repo=second, tasks=["b"], image="team/image:1", image_explicit=True),
    ]
    directory = tmp_path / "runs" / "night"
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(configs[0].model_dump_json())  # the run's first repository's
    (directory / "night.json").write_text(NightConfig(repos=configs).model_dump_json())
    record = RunRecord(directory, RunSummary(run_id="night", repo=str(first), model="m", server_url="u"))
    assert record.config_for(second) == configs[1], "the night's own entry, not the first repository's settings"
    assert record.config_for(first) == configs[0]
    assert record.config_for(tmp_path / "elsewhere") == configs[0]
    (directory / "night.json").unlink()  # a single run keeps config.json only
    assert record.config_for(second) == configs[0]
