"""The refresh stage: a branch's commits replayed onto a new base in a detached scratch checkout and the gate run
there, without the model (minutes of tests instead of hours of generation). `review rebase` tries a run's
verified branches with it; a night brings a stale task's branch onto the new base with it (pipeline.py).

The gate runs in the environment the caller prepared for the new base (the environment stage reuses the image
when the new base's dependencies are the same and builds one from its digest when they changed): the baseline on
the new base (cached like any baseline), then the replayed change after the task's `after` commands (a formatter:
what they change is folded into the rebased commit; one that fails makes it regressed). The rebased commit's
trailers carry the new verdict and counts, and the commit it was rebased onto. Nothing moves here: the rebased
commit lives only in the object store until a caller points a branch at it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Literal

import git
from pydantic import BaseModel

from agent.gate.baseline import BaselineCache, baseline_key
from agent.gate.stage import Gate
from agent.gate.syntax import MAX_CHECKED_BYTES
from agent.gate.test_command import choose_test_command
from agent.gate.verdict import REBASED_ONTO_TRAILER, evidence_trailer, verdict_trailers
from agent.protocol.config import RunConfig
from agent.protocol.events import Event
from agent.protocol.records import EnvironmentRecord
from agent.run.sandboxes import Sandboxes
from agent.run.stages.commands import run_commands
from agent.worktree.leftovers import run_scratch
from agent.worktree.workspace import Workspace
from sandbox import SandboxLimits

Outcome = Literal["clean", "conflicts", "regressed", "gone"]


class BranchTrial(BaseModel):
    task: int
    branch: str
    outcome: Outcome
    conflicts: list[str] = []
    verdict: str | None = None  # the gate's on the rebased branch: verified, unverified or regressed
    reason: str = ""
    tests: str | None = None  # "after (baseline on the new base)"
    regressed: list[str] = []
    commit: str | None = None  # the branch's commit when it was tried: it moves only from there
    rebased_commit: str | None = None
    moved: bool = False
    not_moved: str = ""  # why --apply left the branch where it was


def refresh(
    *,
    repo: git.Repo,
    sandboxes: Sandboxes,
    environment: EnvironmentRecord,
    config: RunConfig,
    task: int,
    branch: str,
    tip: str,
    onto: str,
    commits: list[str],
    cache: BaselineCache,
    run_id: str,
    emit: Callable[[Event], None],
    scratch_root: Path | None = None,
) -> BranchTrial:
    """`commits` (oldest first, ending at `tip`) replayed onto `onto` and gated there: clean (with the rebased
    commit), conflicts (the files) or regressed. `scratch_root`: the run's scratch directory, where its checkout
    goes (None: a scratch directory of its own, for the call)."""
    tried = {"task": task, "branch": branch, "commit": tip}
    image = environment.image_for_tasks(config.image)
    # In a scratch directory of the run (owner record first): removed with git's record of the checkout at its end,
    # and after a kill -9 by the next run's sweep.
    owned = run_scratch(run_id, Path(repo.common_dir).resolve()) if scratch_root is None else nullcontext(scratch_root)
    with owned as scratch:
        workspace = Workspace.detached(
            repo, onto, label=branch, max_file_bytes=config.max_file_bytes, scratch_root=scratch
        )
        try:
            chosen = choose_test_command(config.test_cmd, workspace.path)
            test_command = chosen.command if chosen is not None else None
            with sandboxes.open(
                image,
                workspace.path,
                run_id=run_id,
                limits=SandboxLimits(command_timeout_s=config.command_timeout_s),
                read_only_paths=[workspace.git_common_dir],
            ) as executor:
                gate = Gate(
                    executor,
                    test_command,
                    timeout_s=config.suite_timeout_s,
                    cache=cache,
                    cache_key=baseline_key(onto, test_command or "", sandboxes.identity(image)),
                    emit=emit,
                    unavailable=environment.unavailable(),
                )
                baseline = gate.baseline()
                conflicts = workspace.replay(commits)
                if conflicts:
                    return BranchTrial(**tried, outcome="conflicts", conflicts=conflicts, reason="conflicts")
                failure = run_commands(executor, config.after, "after", timeout_s=config.suite_timeout_s)
                if failure is not None:
                    return BranchTrial(**tried, outcome="regressed", verdict="regressed", reason=failure.describe())
                check = gate.check(workspace.changed_paths(), partial(workspace.files_at, limit=MAX_CHECKED_BYTES))
            tests = evidence_trailer(baseline, check.final)
            # The evidence of the new base replaces the old base's in the rebased commit, with what `after` changed.
            trailers = {**verdict_trailers(baseline, check), REBASED_ONTO_TRAILER: onto}
            rebased = workspace.retrailer(trailers, with_changes=bool(config.after))
        finally:
            workspace.remove()
    return BranchTrial(
        **tried,
        outcome="regressed" if check.verdict == "regressed" else "clean",
        verdict=check.verdict,
        reason=check.reason,
        tests=tests,
        regressed=check.comparison.regressed if check.comparison else [],
        rebased_commit=rebased,
    )
