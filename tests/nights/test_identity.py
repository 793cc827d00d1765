"""A night task's identity: its key (an `id`, else its words), the fingerprint of the settings that change its
result (and not of those that only change how hard the agent tries), and its kind."""

from __future__ import annotations

from pathlib import Path

from agent.nights.identity import fingerprint, sharded_task, task_key, wanted_branch
from agent.nights.kinds import kind_of
from agent.protocol.config import LLMConfig, RunConfig, Shard, TaskSpec

CONFIG = RunConfig(repo=Path("/r"), tasks=["x"])


def test_the_key_is_the_id_else_the_words_whitespace_aside() -> None:
    assert task_key("nightly", TaskSpec(text="Move it", id="move-1")) == "nightly/move-1"
    words = task_key("nightly", TaskSpec(text="Move  the\nhelpers"))
    assert (
        words
        == task_key("nightly", TaskSpec(text="Move the helpers"))
        != task_key("other", TaskSpec(text="Move the helpers"))
    )
    assert words.startswith("nightly/t-") and len(words) == len("nightly/t-") + 12


def test_a_shard_is_a_task_of_its_own_its_scope_in_the_fingerprint_and_the_prompt() -> None:
    spec = TaskSpec(text="Move it")
    part = Shard(id="src-a-1234abcd", label="src/a/", scope="Only change files under src/a/.", directory="src/a")
    shard = spec.model_copy(update={"part": part})
    assert task_key("nightly", shard) == f"{task_key('nightly', spec)}#src-a-1234abcd"
    assert sharded_task(task_key("nightly", shard)) == task_key("nightly", spec)
    assert wanted_branch("nightly", shard) == "refactor-agent/nightly/move-it-src-a"
    assert fingerprint(CONFIG, shard).shard == "Only change files under src/a/."
    assert fingerprint(CONFIG, spec).shard is None
    assert shard.prompt() == "Move it\n\nOnly change files under src/a/." and spec.prompt() == "Move it"


def test_the_fingerprint_changes_with_what_changes_the_result_only() -> None:
    spec = TaskSpec(text="Move it")
    base = fingerprint(CONFIG, spec)
    changed = [
        CONFIG.model_copy(update={"llm": LLMConfig(model="other")}),
        CONFIG.model_copy(update={"llm": LLMConfig(effort="high")}),
        CONFIG.model_copy(update={"test_cmd": "pytest -x"}),
        CONFIG.model_copy(update={"before": ["ruff --fix ."]}),
    ]
    assert all(fingerprint(config, spec) != base for config in changed)
    same = [
        CONFIG.model_copy(update={"max_turns": 7}),
        CONFIG.model_copy(update={"llm": LLMConfig(sampling={"temperature": 0.3})}),
        CONFIG.model_copy(update={"image": "python:3.12"}),  # not explicit: the environment decides
    ]
    assert all(fingerprint(config, spec) == base for config in same)
    assert fingerprint(CONFIG, TaskSpec(text="Move it", id="m")).text == "Move it"  # words change a named task
    assert (
        fingerprint(CONFIG.model_copy(update={"test_cmd": "pytest -x"}), spec).changed(base)
        == "test_cmd None → pytest -x"
    )


def test_the_kind_is_the_night_files_else_read_from_the_words() -> None:
    assert [
        kind_of(TaskSpec(text=text))
        for text in (
            "Rename compute_area to area",
            "Extract the helpers into util.py",
            "Replace the deprecated datetime.utcnow() calls",
            "Add type hints to pkg/",
            "Fix the new deprecation warnings",
            "Remove unused imports",
            "Reword the area docstring",
            "Add a units module",
        )
    ] == ["rename", "move", "api migration", "typing", "api migration", "cleanup", "docs", "other"]
    assert kind_of(TaskSpec(text="Rename x", kind="docs")) == "docs"
