"""Who a night file's task is across nights: its key (the night and its `id`, else its words), the fingerprint of
the settings that change its result, the record's file name for a repository, and its branch, allocated once."""

from __future__ import annotations

import hashlib
from pathlib import Path

from agent.protocol.config import RunConfig, TaskSpec
from agent.protocol.nights import Fingerprint, TaskKey
from agent.worktree.workspace import BRANCH_PREFIX, task_slug

TASK_TRAILER = "Refactor-Agent-Task"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def repository_key(work_tree: Path, common_dir: Path) -> str:
    """The record's file name: readable by the checkout's name, unique by its git directory."""
    return f"{task_slug(work_tree.name, 24)}-{_sha(str(common_dir.resolve()))[:12]}"


def task_key(night: str, spec: TaskSpec) -> TaskKey:
    """`<night>/<id>`, else `<night>/t-<hash of the words>` (whitespace does not make a new task); a shard's has
    `#<shard id>` after it."""
    key = f"{night}/{spec.id}" if spec.id is not None else f"{night}/t-{_sha(' '.join(spec.text.split()))[:12]}"
    return f"{key}#{spec.part.id}" if spec.part is not None else key


def sharded_task(key: TaskKey) -> TaskKey:
    """The key of the task a shard's key is of (the key itself when it is no shard's)."""
    return key.partition("#")[0]


def fingerprint(config: RunConfig, spec: TaskSpec) -> Fingerprint:
    environment = config.environment.model_dump_json() if config.environment is not None else None
    return Fingerprint(
        text=spec.text if spec.id is not None else None,
        model=config.llm.model,
        effort=config.llm.effort,
        test_cmd=config.test_cmd,
        image=config.image if config.image_explicit else None,
        environment=_sha(environment) if environment is not None else None,
        before=config.before,
        after=config.after,
        shard=spec.part.scope if spec.part is not None else None,
    )


def wanted_branch(night: str, spec: TaskSpec) -> str:
    """`refactor-agent/<night>/<task-slug>`, a shard's with its label's slug after it (`...-src-a`)."""
    branch = f"{BRANCH_PREFIX}{night}/{task_slug(spec.text)}"
    return f"{branch}-{task_slug(spec.part.label, 30)}" if spec.part is not None else branch


def allocate_branch(key: TaskKey, wanted: str, taken: set[str]) -> str:
    """`wanted` when no other task (or no branch that is not ours) has it, else one suffixed by the key: two tasks
    with one slug get distinct names, and a task added later never renames an older one's."""
    return wanted if wanted not in taken else f"{wanted}-{_sha(key)[:6]}"
