"""One task's change as review shows it: the commit message and the diff from its branch, or from the run's
record when the branch holds no commit (no_changes, failed) or is gone."""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent.record.report import FileChange, file_changes
from agent.review.records import TaskRef
from agent.review.repository import UserRepository

_TRAILER = re.compile(r"^Refactor-Agent-[\w-]+: ")


@dataclass(frozen=True)
class TaskChange:
    ref: TaskRef
    message: str
    diff: str
    cut_note: str  # '' unless the diff shown is only the beginning of the change
    tip: str | None  # the branch's commit when the diff comes from it

    @property
    def title(self) -> str:
        return self.message.strip().splitlines()[0] if self.message.strip() else self.ref.task.task

    @property
    def body(self) -> str:
        """The message after its first line, without refactor-agent's trailers (the evidence says them better)."""
        lines = self.message.strip().splitlines()[1:]
        return "\n".join(line for line in lines if not _TRAILER.match(line)).strip()

    @property
    def files(self) -> list[FileChange]:
        return file_changes(self.diff)

    @property
    def deleted(self) -> list[str]:
        return deleted_files(self.diff)


def deleted_files(diff: str) -> list[str]:
    deleted, path = [], None
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            path = line.rsplit(" b/", 1)[-1]
        elif line.startswith("deleted file mode") and path is not None:
            deleted.append(path)
    return deleted


def read_change(ref: TaskRef, repository: UserRepository) -> TaskChange:
    task = ref.task
    tip = repository.tip(task.branch) if task.branch and task.commit else None
    if tip is None:
        recorded = ref.run.diffs().get(task.index, "")
        return TaskChange(ref, task.summary, recorded, "", None)
    diff = repository.diff(tip)
    text = diff.data.decode("utf-8", errors="replace")
    cut = f"the first {len(diff.data)} of {diff.total_bytes} bytes" if diff.total_bytes > len(diff.data) else ""
    return TaskChange(ref, repository.message(tip), text, cut, tip)
