"""Benchmark the environment stage and the gate's baseline on a corpus of real repositories' git checkouts.

    .venv/bin/python bench/environments.py --corpus DIR              # every repository of bench/corpus.toml
    .venv/bin/python bench/environments.py --corpus DIR --only flask --cold
    .venv/bin/python bench/environments.py --table                   # the table of the last measurements

Each repository of bench/corpus.toml is expected at DIR/<name>, checked out at the manifest's commit, and run
with no configuration at all, the way `refactor-agent run` treats it: the environment stage (the repository's
own sources, packages from the host's index configuration through the egress proxy, the collection check), then
the gate's baseline in a sandbox with no network on a worktree of that commit, capped at the product's suite
timeout, then (unless --no-check) the gate's check of the same unchanged tree: the verdict a task that changed
nothing would get, which is "verified" only when the suite's evidence can be trusted. One repository failing,
whatever the reason, is one row saying why; the next one still runs. Results go to bench/out/environments.json
(rows keyed by repository, so runs of a few repositories update the rest in place) and a Markdown table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
import tomllib
import traceback
from collections.abc import Callable
from pathlib import Path

import docker
import git
from pydantic import BaseModel, computed_field

ROOT = Path(__file__).resolve().parent.parent
# This checkout's code, not the one the virtualenv's editable install points at (a worktree of a helper).
sys.path.insert(0, str(ROOT))

from agent.environment.plan import ENV_REPOSITORY, repository_slug  # noqa: E402
from agent.environment.stage import prepare_environment  # noqa: E402
from agent.gate.baseline import BaselineCache  # noqa: E402
from agent.gate.results import SuiteRun  # noqa: E402
from agent.gate.stage import Gate  # noqa: E402
from agent.gate.test_command import detect_test_command  # noqa: E402
from agent.protocol.config import RunConfig  # noqa: E402
from agent.protocol.records import EnvironmentRecord  # noqa: E402
from agent.worktree.workspace import Workspace, head_commit, open_repository  # noqa: E402
from sandbox import DEFAULT_IMAGE, DockerSandbox, SandboxLimits, docker_client  # noqa: E402
from sandbox.errors import one_line  # noqa: E402

MANIFEST = ROOT / "bench" / "corpus.toml"
OUT = ROOT / "bench" / "out"
RESULTS = OUT / "environments.json"
# The Done-when of issue 19: the suite runs and at least this share of its collected tests pass.
PASS_SHARE = 0.9
SUITE_TIMEOUT_S = RunConfig.model_fields["suite_timeout_s"].default
MAX_FILE_BYTES = RunConfig.model_fields["max_file_bytes"].default


class CorpusEntry(BaseModel):
    name: str
    repository: str  # owner/name on GitHub
    commit: str
    shape: str
    why: str


class Row(BaseModel):
    name: str
    repository: str
    commit: str
    measured_at: str
    agent_commit: str
    error: str | None = None  # why the row stopped short (a missing checkout, an exception of the bench)
    environment: EnvironmentRecord | None = None
    stage_s: float | None = None
    test_command: str | None = None
    test_command_source: str = ""  # why that command: `tox.ini [testenv] commands`, ...
    suite_timeout_s: float | None = None
    baseline: SuiteRun | None = None
    verdict: str | None = None  # the gate's check of the unchanged tree
    verdict_reason: str = ""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def counts(self) -> dict[str, int]:
        return self.baseline.counts if self.baseline is not None and self.baseline.ran else {}

    @computed_field  # type: ignore[prop-decorator]
    @property
    def collected(self) -> int:
        return sum(self.counts.values())

    @computed_field  # type: ignore[prop-decorator]
    @property
    def import_errors(self) -> list[str]:
        """Test modules that could not be imported: the gate records them apart from the tests that ran."""
        return sorted(self.baseline.import_errors) if self.baseline is not None else []

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pass_share(self) -> float | None:
        return self.counts.get("passed", 0) / self.collected if self.collected else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def meets(self) -> bool:
        share = self.pass_share
        return share is not None and share >= PASS_SHARE


Progress = Callable[[str], None]


def load_manifest(path: Path = MANIFEST) -> list[CorpusEntry]:
    return [CorpusEntry.model_validate(entry) for entry in tomllib.loads(path.read_text())["repository"]]


def agent_commit() -> str:
    try:
        described = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return described.stdout.strip()


# The code this process imported: the checkout's HEAD may move on while a long run goes on with it.
AGENT_COMMIT = agent_commit()


def remove_images(client: docker.DockerClient, repository: str) -> None:
    """This repository's environment images, so the next prepare is a cold build."""
    prefix = f"{ENV_REPOSITORY}:{repository_slug(repository)}-"
    for image in client.images.list(name=ENV_REPOSITORY):
        for tag in image.tags:
            if tag.startswith(prefix):
                client.images.remove(tag, force=True)


def checkout(corpus: Path, entry: CorpusEntry) -> git.Repo:
    """The entry's checkout, refused unless its HEAD is the manifest's commit (the numbers are of that commit)."""
    repo = open_repository(corpus / entry.name)
    head = head_commit(repo)
    if head != entry.commit:
        raise ValueError(f"{corpus / entry.name} is at {head[:12]}, the manifest pins {entry.commit[:12]}")
    return repo


def baseline_and_check(
    client: docker.DockerClient, repo: git.Repo, record: EnvironmentRecord, row: Row, timeout_s: float, check: bool
) -> None:
    """What a task's sandbox does before and after the model: the baseline, then the gate on the same tree."""
    failed = record.status == "failed"
    image = DEFAULT_IMAGE if failed else record.image
    with tempfile.TemporaryDirectory(prefix="bench-environments-") as scratch:
        workspace = Workspace.detached(
            repo, row.commit, label="bench", max_file_bytes=MAX_FILE_BYTES, scratch_root=Path(scratch)
        )
        try:
            chosen = detect_test_command(workspace.path)
            row.test_command = chosen.command if chosen is not None else None
            row.test_command_source = chosen.source if chosen is not None else "none found"
            with DockerSandbox(
                image,
                workspace.path,
                run_id=f"bench-{repository_slug(row.name)}",
                limits=SandboxLimits(command_timeout_s=timeout_s),
                client=client,
                read_only_paths=[workspace.git_common_dir],
            ) as sandbox:
                gate = Gate(
                    sandbox,
                    row.test_command,
                    timeout_s=timeout_s,
                    cache=BaselineCache(Path(scratch)),
                    cache_key=None,
                    emit=lambda _event: None,
                    unavailable=record.error if failed else None,
                )
                row.baseline = gate.baseline()
                if check:
                    verdict = gate.check([], lambda _path, _which: None)
                    row.verdict, row.verdict_reason = verdict.verdict, verdict.reason
        finally:
            workspace.remove()


def measure(
    client: docker.DockerClient, corpus: Path, entry: CorpusEntry, *, timeout_s: float, cold: bool, check: bool
) -> Row:
    row = Row(
        name=entry.name,
        repository=entry.repository,
        commit=entry.commit,
        measured_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        agent_commit=AGENT_COMMIT,
        suite_timeout_s=timeout_s,
    )
    try:
        repo = checkout(corpus, entry)
        if cold:
            remove_images(client, entry.name)
        started = time.monotonic()
        record = prepare_environment(
            repo,
            client=client,
            sandbox_image=DEFAULT_IMAGE,
            image_explicit=False,
            spec=None,
            test_command=None,
            log_path=OUT / "environments" / f"{entry.name}-build.log",
            progress=lambda message: print(f"  {entry.name}: {message}", flush=True),
        )
        row.environment, row.stage_s = record, round(time.monotonic() - started, 1)
        baseline_and_check(client, repo, record, row, timeout_s, check)
    except Exception as error:  # one repository's failure is its row; the next one still runs
        row.error = f"{error.__class__.__name__}: {one_line(error)}"
        (OUT / "environments").mkdir(parents=True, exist_ok=True)
        (OUT / "environments" / f"{entry.name}-bench-error.txt").write_text(traceback.format_exc())
    return row


def _cell(text: str, limit: int = 160) -> str:
    """Table-safe: one line, no pipes, capped (the text comes from the repositories' own output)."""
    flat = " ".join(text.split()).replace("|", "\\|")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _environment_cell(row: Row) -> str:
    """The sources used and those skipped with the reason, then what stopped the build or the collection check."""
    record = row.environment
    if record is None:
        return "–"
    text = "; ".join(record.sources) or (
        f"{record.source}: {record.description}" if record.description else record.source
    )
    if record.skipped:
        text += " (skipped: " + "; ".join(record.skipped) + ")"
    if record.status == "failed":
        text += f" — FAILED: {record.error}"
    elif record.collect_note:
        text += f" — {record.collect_note}"
    return _cell(text, 400)


def table(rows: list[Row]) -> str:
    lines = [
        "| repository | environment: sources used (skipped) | status | stage s | test command (source) | collected "
        "| passed | failed | errors | skipped | import errors | baseline | suite s | no-change verdict | ≥90% pass |",
        "| --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | --- |",
    ]
    for row in rows:
        counts = row.counts
        status = row.environment.status if row.environment is not None else "–"
        baseline = row.baseline.describe() if row.baseline is not None else (row.error or "–")
        command = f"{_cell(row.test_command or '–', 80)} ({_cell(row.test_command_source, 60)})"
        suite_s = f"{row.baseline.duration_s:.0f}" if row.baseline is not None and row.baseline.duration_s else "–"
        verdict = f"{row.verdict} ({row.verdict_reason})" if row.verdict else "–"
        share = "no" if row.pass_share is None else f"{'yes' if row.meets else 'no'} ({row.pass_share:.0%})"
        lines.append(
            f"| {row.name} | {_environment_cell(row)} | {status} | {row.stage_s if row.stage_s is not None else '–'} "
            f"| {command} | {row.collected} | {counts.get('passed', 0)} "
            f"| {counts.get('failed', 0)} | {counts.get('error', 0)} | {counts.get('skipped', 0)} "
            f"| {len(row.import_errors)} | {_cell(baseline)} | {suite_s} | {_cell(verdict, 100)} | {share} |"
        )
    meeting = sum(row.meets for row in rows)
    verified = sum(row.verdict == "verified" for row in rows)
    collected = sum(row.collected for row in rows)
    passed = sum(row.counts.get("passed", 0) for row in rows)
    lines.append(
        f"| **total: {len(rows)}** | | | {sum(row.stage_s or 0 for row in rows):.0f} | | {collected} | {passed} "
        f"| | | | | | | {verified} verified | **{meeting} of {len(rows)} ({meeting / max(len(rows), 1):.0%})** |"
    )
    return "\n".join(lines)


def load_rows() -> dict[str, Row]:
    if not RESULTS.exists():
        return {}
    return {name: Row.model_validate(row) for name, row in json.loads(RESULTS.read_text()).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, help="the directory holding the checkouts, one per manifest name")
    parser.add_argument("--only", action="append", help="a repository of the manifest (repeatable)")
    parser.add_argument("--cold", action="store_true", help="remove the repositories' environment images first")
    parser.add_argument("--no-check", action="store_true", help="the baseline only, no second run of the suite")
    parser.add_argument("--suite-timeout", type=float, default=SUITE_TIMEOUT_S, help="seconds, for every suite")
    parser.add_argument("--table", action="store_true", help="print the table of the recorded rows and stop")
    arguments = parser.parse_args()
    entries = load_manifest()
    rows = load_rows()
    if not arguments.table:
        if arguments.corpus is None:
            parser.error("--corpus DIR is needed to measure (or --table to print the last results)")
        unknown = set(arguments.only or []) - {entry.name for entry in entries}
        if unknown:
            parser.error(f"not in {MANIFEST.name}: {', '.join(sorted(unknown))}")
        client = docker_client(timeout_s=1800)
        for entry in entries:
            if arguments.only and entry.name not in arguments.only:
                continue
            print(f"{entry.name} ({entry.repository} @ {entry.commit[:12]})", flush=True)
            row = measure(
                client,
                arguments.corpus,
                entry,
                timeout_s=arguments.suite_timeout,
                cold=arguments.cold,
                check=not arguments.no_check,
            )
            rows[entry.name] = row
            OUT.mkdir(parents=True, exist_ok=True)
            RESULTS.write_text(json.dumps({name: row.model_dump() for name, row in rows.items()}, indent=1) + "\n")
            print(table([row]).splitlines()[2], flush=True)
    print(table([rows[entry.name] for entry in entries if entry.name in rows]))


if __name__ == "__main__":
    main()
