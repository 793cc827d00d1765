"""Resume's reading of a transcript, on transcripts a real loop wrote through the real journal."""

from __future__ import annotations

from pathlib import Path

from agent.conversation.compactor import Compactor
from agent.conversation.window import ContextWindow
from agent.loop import AgentLoop
from agent.protocol.events import Event, TaskStart
from agent.record.journal import RunJournal
from agent.record.progress import read_progress
from tools.base import ToolContext
from tools.registry import default_registry

from support.local_sandbox import LocalExecutor
from support.repos import SAMPLE_FILES, make_repo
from support.scripted_model import ScriptedModel
from support.scripted_server import Reply, rendered_prompt, tokens_of

VIEW = Reply(tool_calls=[("view_file", {"path": "pkg/big.py"})], reasoning="Let me look. " * 40)


def test_resume_rebuilds_a_compacted_conversation(tmp_path: Path) -> None:
    """Killed after a compaction (the transcript ends there): the conversation read back is the compacted one
    the loop went on with, system message included, and every request's and compaction's figures are kept."""
    big = "".join(f"value_{n} = {n}\n" for n in range(400))
    repo = make_repo(tmp_path / "repo", {**SAMPLE_FILES, "pkg/big.py": big})
    registry = default_registry()
    tools = registry.schemas()
    window = ContextWindow(
        10_000, 0.85, lambda messages: tokens_of(rendered_prompt({"messages": messages, "tools": tools}))
    )
    journal = RunJournal(tmp_path / "runs", "run-1")
    live: list[list[dict]] = []

    def emit(event: Event) -> None:
        event.task = 1
        journal.record(event)
        if event.type == "compaction":
            live.append(list(loop.messages))

    journal.record(TaskStart(task=1, text="Rename compute_area to area", branch="refactor-agent/x"))
    model = ScriptedModel([VIEW] * 7)  # the script runs out: the task ends there, as a kill would leave it
    loop = AgentLoop(
        model,
        registry,
        ToolContext(LocalExecutor(repo), None, 30, 4_000),
        max_turns=20,
        emit=emit,
        compactor=Compactor(window, lambda: "[ledger] files changed so far: 0"),
    )
    loop.run("SYSTEM " * 200, "Rename compute_area to area")
    journal.close()
    assert live, "the conversation outgrew the window"
    progress = read_progress(journal.directory / "transcript.jsonl").in_flight[1]
    assert progress.messages[: len(live[-1])] == live[-1]
    assert progress.messages == loop.messages[: len(progress.messages)]
    assert len(progress.compactions) == len(live) and progress.compactions == loop.compactions
    assert len(progress.requests) == len(loop.requests)
