"""Wires an eval together: preflight (Docker, and the server unless the model is scripted), then the tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import typer
from pydantic import ValidationError

from agent.commands import EXIT_USAGE, UsageProblem
from agent.eval.harness import REPORT_FILE, run_eval
from agent.eval.score import EvalReport, compare, totals_line
from agent.eval.scripted import noop_model, oracle_model
from agent.eval.suite import SuiteTask
from agent.protocol.config import RunConfig
from agent.protocol.model import ChatModel
from agent.record.journal import new_run_id
from agent.run.interrupt import Interrupted, stop_signals
from agent.run.sandboxes import docker_sandboxes
from agent.safety.printable import counted
from agent.safety.private_dirs import PRIVATE_MODE, private_dir
from agent.server.api import ServerError
from agent.server.chat import OpenAIChatModel
from agent.server.ensure import ensure_server
from sandbox import SandboxError

Scripted = Literal["oracle", "noop"] | None


def load_report(path: Path) -> EvalReport:
    """An earlier eval.json (for --compare), refused in one line when it is not one."""
    try:
        return EvalReport.model_validate_json(path.read_bytes())
    except OSError as error:
        raise UsageProblem(f"--compare {path}: cannot read it: {error.strerror}") from None
    except ValidationError:
        raise UsageProblem(f"--compare {path}: not an eval.json written by refactor-agent eval") from None


def _log(message: str) -> None:
    typer.echo(message)


def execute_eval(
    tasks: list[SuiteTask],
    template: RunConfig,
    *,
    suite: Path,
    variant: str,
    scripted: Scripted,
    other: EvalReport | None,
) -> int:
    """0 when every task was scored (whatever the score), 1 when some ended in an error, 2 on a failed preflight."""
    try:
        sandboxes = docker_sandboxes()
        sandboxes.preflight([template.image])
        server_url = None if scripted else ensure_server(template.llm, log=_log)
    except (SandboxError, ServerError) as error:
        typer.echo(f"error: {error}", err=True)
        return EXIT_USAGE
    if server_url is not None:
        template = template.model_copy(update={"llm": template.llm.model_copy(update={"server_url": server_url})})
        model: ChatModel = OpenAIChatModel(template.llm)

    def model_for(task: SuiteTask) -> ChatModel:
        if scripted == "oracle":
            assert task.reference is not None  # checked before the eval started
            return oracle_model(task.reference.read_text(encoding="utf-8"), task.id)
        return noop_model() if scripted == "noop" else model

    eval_id = f"eval-{new_run_id()}"
    directory = template.runs_dir / eval_id
    private_dir(template.runs_dir)
    directory.mkdir(mode=PRIVATE_MODE)
    report = EvalReport(
        eval_id=eval_id,
        suite=str(suite),
        variant=variant,
        model=scripted or template.llm.model,
        ledger=template.ledger,
        symbol_tools=template.symbol_tools,
    )
    _log(f"eval {eval_id}: {counted(len(tasks), 'task')} of {suite} ({variant}), records in {directory}")
    with stop_signals():
        try:
            run_eval(
                tasks,
                report,
                directory,
                template=template,
                model_for=model_for,
                server_url=server_url,
                sandboxes=sandboxes,
                log=_log,
            )
        except Interrupted as stop:
            _log(f"eval stopped by {stop.signal_name}: {counted(len(report.results), 'task')} scored, in {directory}")
            return stop.exit_code
    _log(totals_line(report))
    if other is not None:
        for line in compare(report, other):
            _log(line)
    _log(f"report: {directory / REPORT_FILE}")
    return 1 if any(result.outcome == "error" for result in report.results) else 0
