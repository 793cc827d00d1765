"""`refactor-agent review ...`: the morning's commands. `review` lists runs, `review RUN` shows one run's tasks
(a shorthand for `review tasks RUN`), the subcommands act on one task's branch or on a whole run.

BRANCH_OR_TASK is a task branch (refactor-agent/<run-id>/<n>-<slug>), RUN/N (task N of run RUN), or N (task N
of the latest run). Bad input is one line naming what exists, and exit code 2.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.syntax import Syntax

from agent.commands import EXIT_FAILED, CommandGroup, Commands, failure, one_line_errors
from agent.nights.errors import NightError
from agent.nights.fates import fates_table, read_record, record_discards, record_of
from agent.protocol.config import RunConfig
from agent.protocol.records import TaskSummary
from agent.review.branch_state import branch_state, shown
from agent.review.change import TaskChange, read_change
from agent.review.pager import TerminalPager
from agent.review.pull_request import pull_request, pull_request_markdown
from agent.review.push import push_task
from agent.review.records import ReviewError, RunRecord, TaskRef, find_task, list_runs, load_run
from agent.review.repository import UserRepository, user_repository
from agent.review.views import change_json, evidence_text, fates_view, run_json, run_line, run_table, task_rows
from agent.safety.printable import counted, printable
from agent.settings.runs_dir import DEFAULT_RUNS_DIR, RunsNotFound, existing_runs_dir, work_tree_holding
from agent.worktree.safe_git import GitError
from agent.worktree.workspace import WorkspaceError
from sandbox.errors import SandboxError

RUN_COMMAND = "tasks"
RECENT_RUNS = 20
# A piped table has no terminal to size it by (unless COLUMNS says): the reviewer's five columns fit this, and
# --wide's operator columns that.
PIPED_TABLE_WIDTH = 100
PIPED_WIDE_TABLE_WIDTH = 240
# `discard --only empty`: the branches of tasks that made no commit (runs before such branches were deleted).
EMPTY = "empty"


class ReviewGroup(Commands):
    """`review RUN` is `review tasks RUN`: a first word that is no subcommand is a run id."""

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        if args and not args[0].startswith("-") and self.get_command(ctx, args[0]) is None:
            return RUN_COMMAND, self.get_command(ctx, RUN_COMMAND), args
        return super().resolve_command(ctx, args)


review_app = CommandGroup(
    cls=ReviewGroup,
    invoke_without_command=True,
    no_args_is_help=False,
    help=(
        "Review the night's runs: `review` lists runs, `review RUN` shows a run's tasks. BRANCH_OR_TASK is a task "
        "branch, RUN/N (task N of RUN) or N (task N of the latest run). Never touches your working tree, index or "
        "current branch."
    ),
)

RunsDirOption = Annotated[
    Path | None,
    typer.Option(
        "--runs-dir",
        metavar="DIR",
        help=f"Run records (default: where this repository's last runs wrote, else ./{DEFAULT_RUNS_DIR}, else the "
        "per-user runs folder).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output (JSON on stdout).")]
RepoOption = Annotated[Path | None, typer.Option("--repo", help="The repository (default: the one the run used).")]
TargetArgument = Annotated[
    str,
    typer.Argument(
        metavar="BRANCH_OR_TASK", help="A task branch, RUN/N (task N of run RUN) or N (task N of the latest run)."
    ),
]
RunArgument = Annotated[str, typer.Argument(metavar="RUN", help="A run id (see `review`).")]
RunOrTaskArgument = Annotated[
    str, typer.Argument(metavar="RUN", help="A run id (see `review`), or RUN/N for task N of it alone.")
]


def _runs_dir(context: typer.Context, given: Path | None, run_id: str | None = None, cwd: Path | None = None) -> Path:
    """A subcommand's --runs-dir, else the one given before it (`review --runs-dir D RUN`), else where the run
    (`run_id`: the one named) or the repository's (`cwd`'s, default the current directory's) last runs are
    (agent/settings/runs_dir.py)."""
    inherited = context.parent.params.get("runs_dir") if context.parent is not None else None
    return existing_runs_dir(given or inherited, run_id, cwd)


def _run_of(target: str) -> str | None:
    """The run a BRANCH_OR_TASK names: RUN of `RUN/N`, else None (N alone or a branch: the latest runs)."""
    run_id, _, number = target.rpartition("/")
    return run_id if run_id and number.isdigit() else None


def _as_json(context: typer.Context, given: bool) -> bool:
    return given or bool(context.parent is not None and context.parent.params.get("as_json"))


@contextmanager
def _one_line_errors() -> Iterator[None]:
    """Bad input exits 2, a failed git or Docker step exits 1; both as one line, never a traceback."""
    failed = one_line_errors(WorkspaceError, GitError, SandboxError, code=EXIT_FAILED, shown=printable)
    with one_line_errors(ReviewError, RunsNotFound, NightError, shown=printable), failed:
        yield


def _say(text: str, *, err: bool = False, nl: bool = True) -> None:
    """Human output: whatever the model wrote (paths, messages, diffs) reaches the terminal as text, not codes."""
    typer.echo(printable(text), err=err, nl=nl)


def _print_json(payload: Any) -> None:
    if isinstance(payload, BaseModel):
        payload = payload.model_dump(mode="json")
    typer.echo(json.dumps(payload, indent=2, ensure_ascii=False))


@contextmanager
def _repository(record: RunRecord, repo: Path | None, task: TaskSummary | None = None) -> Iterator[UserRepository]:
    """--repo, else the task's own repository (a night has several), else the run's (first) one."""
    recorded = task.repo if task is not None and task.repo else record.summary.repo
    with user_repository(repo or Path(recorded)) as repository:
        yield repository


def _empty(task: TaskSummary) -> str | None:
    """`empty` for a task that made no commit: `discard --only empty` picks its branch."""
    return EMPTY if task.commit is None else None


def _change(runs_dir: Path, target: str, repo: Path | None) -> TaskChange:
    ref: TaskRef = find_task(runs_dir, target)
    with _repository(ref.run, repo, ref.task) as repository:
        return read_change(ref, repository)


@review_app.callback()
def overview(
    context: typer.Context,
    runs_dir: RunsDirOption = None,
    as_json: JsonOption = False,
    limit: Annotated[int, typer.Option(min=1, help="How many runs to list.")] = RECENT_RUNS,
) -> None:
    """Recent runs, newest first: id, repository, tasks, verdict counts, wall time."""
    if context.invoked_subcommand is not None:
        return
    with _one_line_errors():
        runs_dir = existing_runs_dir(runs_dir)
        runs = list_runs(runs_dir)[:limit]
    if as_json:
        _print_json([run_json(record) for record in runs])
        return
    for record in runs:
        _say(run_line(record))
    if not runs:
        _say(f"no runs in {runs_dir}")


@review_app.command(RUN_COMMAND)
def tasks(
    context: typer.Context,
    run: RunArgument,
    wide: Annotated[
        bool, typer.Option("--wide", help="Also branch, commit, branch state, turns, wall time, tokens, cache.")
    ] = False,
    runs_dir: RunsDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """A run's tasks as in its report: verdict, task, tests Δ, files ±, then why each task that is not verified
    is so (or `review RUN`)."""
    with _one_line_errors():
        record = load_run(_runs_dir(context, runs_dir, run), run)
        night = any(task.key is not None for task in record.summary.tasks)  # a named night's stable branches
        states = _branch_states(record) if wide or night else None
    if _as_json(context, as_json):
        rows = task_rows(record)
        for row, task in zip(rows, record.summary.tasks, strict=True):
            if states is not None:
                row["branch state"] = states[task.index]
        _print_json({"run": record.summary.model_dump(mode="json"), "rows": rows})
        return
    console = _table_console(PIPED_WIDE_TABLE_WIDTH if wide else PIPED_TABLE_WIDTH)
    if wide:
        console.print(run_table(record, states))
    else:
        console.print(run_table(record, stable=states))


def _table_console(piped_width: int) -> Console:
    """The terminal's width; `piped_width` when the output is piped and COLUMNS does not say one."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=piped_width)
    return console


def _branch_states(record: RunRecord) -> dict[int, str]:
    """Each task's branch state now, in its own repository (a night has several)."""
    states: dict[int, str] = {}
    for task in record.summary.tasks:
        with _repository(record, None, task) as repository:
            states[task.index] = shown(branch_state(repository, task))
    return states


@review_app.command()
def fates(
    context: typer.Context,
    runs_dir: RunsDirOption = None,
    repo: Annotated[
        Path | None, typer.Option("--repo", help="The repository (default: the one the current directory is in).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """What became of a repository's named-night tasks over the last nights: per task its branch, kind, fate and
    nights open (nights its branch has waited for review); per kind of task how many were merged, discarded or
    are waiting, and the merge rate: merged / (merged + discarded), the share merged of the tasks a reviewer
    decided on (waiting, failing and archived tasks do not count)."""
    with _one_line_errors():
        path = repo or work_tree_holding(Path.cwd())
        if path is None:
            raise ReviewError(f"{Path.cwd()} is not in a git repository: pass --repo PATH")
        with user_repository(path) as repository:
            where = record_of(_runs_dir(context, runs_dir, cwd=path), repository.repo).resolve()
        table = fates_table(read_record(where), where)
    if _as_json(context, as_json):
        _print_json(table)
        return
    _table_console(PIPED_TABLE_WIDTH).print(fates_view(table))


@review_app.command()
def show(
    context: typer.Context,
    target: TargetArgument,
    runs_dir: RunsDirOption = None,
    repo: RepoOption = None,
    as_json: JsonOption = False,
) -> None:
    """A task's commit message, verdict and test evidence, then its diff (in a pager on a terminal)."""
    with _one_line_errors():
        change = _change(_runs_dir(context, runs_dir, _run_of(target)), target, repo)
    if _as_json(context, as_json):
        _print_json(change_json(change))
        return
    console = Console()
    if not console.is_terminal:
        _say(evidence_text(change))
        if change.diff:
            _say(change.diff)
        return
    with console.pager(TerminalPager(), styles=True):
        console.print(printable(evidence_text(change)), markup=False, highlight=False)
        if change.diff:
            console.print(Syntax(printable(change.diff), "diff", word_wrap=True))


@review_app.command()
def pr(
    context: typer.Context,
    target: TargetArgument,
    output: Annotated[
        Path | None, typer.Option(help="Write the Markdown here (for `gh pr create --body-file`).")
    ] = None,
    runs_dir: RunsDirOption = None,
    repo: RepoOption = None,
    as_json: JsonOption = False,
) -> None:
    """A pull-request description in Markdown: what changed and why, test evidence, files, risks, how it was made."""
    with _one_line_errors():
        change = _change(_runs_dir(context, runs_dir, _run_of(target)), target, repo)
        task = change.ref.task
        if task.commit is None:  # nothing to merge: the evidence is in `review show`
            raise ReviewError(
                f"task {task.index} of run {change.ref.run.run_id} has no commit ({task.verdict}); "
                f"see review show {change.ref.run.run_id}/{task.index}"
            )
    config = change.ref.run.config()
    title, body = pull_request(change, config)
    if output is not None:
        # The body only: `gh pr create --title` takes the title (printed), --body-file the rest.
        try:
            output.write_text(printable(body), encoding="utf-8")
        except OSError as error:
            raise failure(f"--output {output}: {error.strerror}") from None
    if _as_json(context, as_json):
        _print_json({"title": title, "body": body, "branch": change.ref.task.branch, "commit": change.tip})
    elif output is not None:
        _say(f"wrote {output}; title: {title}")
    else:
        _say(pull_request_markdown(change, config), nl=False)


@review_app.command()
def push(
    context: typer.Context,
    target: TargetArgument,
    remote: Annotated[str, typer.Option(help="A remote you configured (git remote -v).")],
    runs_dir: RunsDirOption = None,
    repo: RepoOption = None,
    as_json: JsonOption = False,
) -> None:
    """Push a task's branch to REMOTE under the same name. Nothing is ever pushed unless you run this. A night's
    branch (replaced each night) goes with --force-with-lease on the tip refactor-agent last pushed there: one
    someone else moved on REMOTE is refused."""
    with _one_line_errors():
        runs = _runs_dir(context, runs_dir, _run_of(target))
        ref = find_task(runs, target)
        with _repository(ref.run, repo, ref.task) as repository:
            pushed = push_task(ref, repository, remote, runs, lambda line: _say(line, err=True))
    if _as_json(context, as_json):
        _print_json({"branch": pushed.branch, "remote": remote, "commit": pushed.commit, "replaced": pushed.replaced})
    else:
        replacing = f", replacing {pushed.replaced[:12]}" if pushed.replaced else ""
        _say(f"pushed {pushed.branch} ({pushed.commit[:12]}) to {remote}{replacing}")


@review_app.command()
def rebase(
    context: typer.Context,
    run: RunArgument,
    onto: Annotated[str, typer.Option(help="The branch, tag or commit to rebase onto, e.g. main.")],
    apply: Annotated[
        bool, typer.Option(help="Move each branch that rebased cleanly and is verified on the new base.")
    ] = False,
    runs_dir: RunsDirOption = None,
    repo: RepoOption = None,
    as_json: JsonOption = False,
) -> None:
    """Rebase every verified branch of RUN onto --onto in scratch worktrees and run the gate there, in the run's
    environment as the new base needs it: clean, conflicts (files) or regressed per branch, and which branches
    conflict with each other. Moves nothing without --apply, and only refactor-agent/* branches verified on the
    new base (their commits then carry the new verdict and counts)."""
    # lazy: docker-py and the gate's machinery load for this command only
    from agent.review.rebase import Rebaser
    from agent.run.sandboxes import DockerSandboxes
    from sandbox import docker_client

    machine = _as_json(context, as_json)

    def log(line: str) -> None:
        _say(line, err=True)

    with _one_line_errors():
        record = load_run(_runs_dir(context, runs_dir, run), run)
        with _repository(record, repo) as repository:
            path = Path(str(repository.repo.working_tree_dir))
            config = record.config_for(path) or RunConfig(repo=path, tasks=["(unknown)"])
            sandboxes = DockerSandboxes(docker_client())
            report = Rebaser(record, repository, config, sandboxes, log).run(onto, apply=apply)
    if machine:
        _print_json(report)
        return
    if not report.branches:
        _say(f"run {record.run_id} has no verified branch to rebase")
    for trial in report.branches:
        detail = {
            "clean": f"{trial.verdict}: {trial.tests or trial.reason}",
            "conflicts": ", ".join(trial.conflicts),
            "regressed": f"{', '.join(trial.regressed) or trial.reason}; tests {trial.tests}",
            "gone": trial.reason,
        }[trial.outcome]
        moved = "  (moved)" if trial.moved else f"  (not moved: {trial.not_moved})" if trial.not_moved else ""
        _say(f"{trial.branch}: {trial.outcome}: {detail}{moved}")
    for pair in report.conflicting_pairs:
        _say(f"conflict between {pair.first} and {pair.second}: {', '.join(pair.files)}")
    if report.branches and not apply:
        _say("nothing moved (pass --apply to move the branches verified on the new base)")


@review_app.command()
def discard(
    context: typer.Context,
    run: RunOrTaskArgument,
    only: Annotated[
        Literal["regressed", "failed", "empty"] | None,
        typer.Option(help="Only the branches of tasks with this verdict, or those of tasks that made no commit."),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False,
    runs_dir: RunsDirOption = None,
    repo: RepoOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete RUN's task branches (all, or --only regressed|failed|empty), or RUN/N's; asks first unless --yes. A
    named night's task whose branch goes is recorded as discarded: later nights skip it (`--retry discarded`)."""
    with _one_line_errors():
        one = _run_of(run)
        directory = _runs_dir(context, runs_dir, one or run)
        if one is not None:
            ref = find_task(directory, run)
            record, tasks = ref.run, [ref.task]
            of = f"task {ref.task.index} of run {record.run_id}"
        else:
            record = load_run(directory, run)
            tasks = record.summary.tasks
            of = f"run {run}"
        chosen = [task for task in tasks if task.branch and only in (None, task.verdict, _empty(task))]
        keys = {task.branch: task.key for task in chosen if task.key is not None and task.published == task.branch}
        deleted: list[str] = []
        kept: dict[str, str] = {}
        with _repository(record, repo, tasks[0] if one is not None else None) as repository:
            present = {
                task.branch: tip
                for task in chosen
                if task.branch
                and (tip := repository.tip(task.branch))
                and (only != EMPTY or tip == task.base_commit)  # an empty branch that moved holds someone's work
            }
            if present and not yes:
                branches = counted(len(present), "branch", "branches")
                if not sys.stdin.isatty():
                    raise ReviewError(f"would delete {branches} of run {run}: pass --yes (no terminal to ask on)")
                _say("\n".join(present), err=True)
                typer.confirm(f"Delete these {branches}?", abort=True, err=True)
            for branch, tip in present.items():
                try:
                    repository.delete(branch, tip)
                    deleted.append(branch)
                except (WorkspaceError, GitError) as error:
                    kept[branch] = str(error)
            if only is None and one is None:  # an unfinished run is discarded too: what resume would continue from
                repository.drop_wip(record.run_id)
            discarded = {keys[branch]: branch for branch in deleted if branch in keys}
            recorded = record_discards(
                directory, repository.repo, repository.git, discarded, lambda line: _say(line, err=True)
            )
    if _as_json(context, as_json):
        _print_json({"deleted": deleted, "kept": kept, "recorded_discarded": recorded})
        return
    listed = "".join(f"\n  {branch}" for branch in deleted)
    _say(f"deleted {counted(len(deleted), 'branch', 'branches')} of {of}{listed}")
    if recorded:
        them = "it" if len(recorded) == 1 else "them"
        _say(f"recorded as discarded in the task record: {counted(len(recorded), 'task')}; later nights skip {them}")
    for branch, why in kept.items():
        _say(f"kept {branch}: {why}", err=True)
    if kept:
        raise typer.Exit(EXIT_FAILED)
