"""One task's own state while its stages run: never shared with another task, so tasks in parallel each have one
(the run's records, journal and baselines are the run's, shared)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agent.loop import AgentLoop
from agent.protocol.config import RunConfig
from agent.protocol.events import Event
from agent.protocol.model import ChatModel
from agent.run.interrupt import Interrupted
from agent.server.kv_cache import PrefixCache
from agent.server.metrics import SpeculationProbe
from agent.worktree.workspace import Workspace, wip_ref


@dataclass
class TaskContext:
    index: int
    config: RunConfig
    task: str
    run_id: str
    model: ChatModel
    server_url: str | None  # where the repository's tokens are counted; None: a scripted model, estimated
    record: Callable[[Event], None]  # the run's journal and observer
    # The model's saved prefixes (a task in parallel: its FleetModel restores them in whichever seat it gets).
    prefix_cache: PrefixCache | None = None
    # The server's counters around the task; None (tasks in parallel share the server): its metrics are estimated.
    probe: SpeculationProbe | None = None
    parallel: bool = False  # one of several tasks at once: a stop reaches the run by its own way (the dispatch)
    loop: AgentLoop | None = None  # while it runs: an interrupted task still reports its turns
    workspace: Workspace | None = None  # while its loop runs (repair rounds too): snapshots after each tool result
    stopped_by: Interrupted | None = None

    def emit(self, event: Event) -> None:
        """Every event of the task carries its index, whoever made it (the loop, the gate, the model client)."""
        if event.task is None:
            event = event.model_copy(update={"task": self.index})
        self.record(event)

    def checkpoint(self) -> None:
        """The loop's hook after each tool result, before it is journaled: the task's files as they are now, on its
        wip ref, so a result in the transcript always has its files kept (resume)."""
        if self.workspace is not None:
            self.workspace.snapshot(wip_ref(self.run_id, self.index))
