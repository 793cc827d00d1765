"""Benchmark `refactor-agent pack` beside repomix and gitingest on real corpora, in one run.

    .venv/bin/python bench/pack.py [--server URL] [--corpus django --corpus sqlalchemy --corpus stdlib]
    .venv/bin/python bench/pack.py --checkout CORPUS/click --checkout CORPUS/attrs   # real git checkouts

Corpora are built offline-friendly: Django and SQLAlchemy source releases from PyPI (pip download, cached in
bench/out/downloads), unpacked and committed as git repositories; the Python standard library of this machine
copied likewise. A --checkout is a project's own git checkout (bench/corpus.toml's), packed as it is, history,
.gitattributes and all, named by its folder. repomix is installed with npm into bench/out/node, gitingest with
pip into its own venv under bench/out. Every tool runs once per corpus under /usr/bin/time, which gives wall
time and peak resident memory (the largest single process of the tree); refactor-agent's own stats add the
packer's time without the interpreter's start-up and imports. refactor-agent runs cold (empty cache) and warm
(cache filled), with a 1,000,000-token budget; offline its counts are estimates, with --server they come from the
server's tokenizer.
Writes bench/out/pack.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
BUDGET = 1_000_000
RELEASES = {"django": "django==5.1.4", "sqlalchemy": "sqlalchemy==2.0.36"}
REPOMIX_VERSION = "1.14.0"
GITINGEST_VERSION = "0.3.1"


class Measurement(BaseModel):
    corpus: str
    tool: str
    wall_s: float
    peak_rss_mb: float
    files: int | None
    tokens: int | None
    counts: str  # exact / estimated / the tool's own tokenizer
    exit_code: int
    packer_s: float | None = None  # refactor-agent only: the packer's own time (its stats), without start-up


def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, check=True, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]


def commit_tree(directory: Path) -> None:
    run(["git", "init", "-q"], cwd=directory)
    run(["git", "add", "-A"], cwd=directory)
    identity = ["-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    run(["git", *identity, "commit", "-q", "-m", "corpus"], cwd=directory)


def release_corpus(name: str) -> Path:
    target = OUT / "corpora" / name
    if (target / ".git").is_dir():
        return target
    downloads = OUT / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d", str(downloads)]
    run([*pip, RELEASES[name]])
    # Other releases of the same project may sit in downloads (bench/prefix_stability.py): take this one's.
    wanted = RELEASES[name].replace("==", "-").lower() + ".tar.gz"
    archive = next(path for path in sorted(downloads.glob("*.tar.gz")) if path.name.lower() == wanted)
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        for member in members:
            member.name = member.name.split("/", 1)[1] if "/" in member.name else ""
        tar.extractall(target, members=[member for member in members if member.name], filter="data")
    commit_tree(target)
    return target


def stdlib_corpus() -> Path:
    target = OUT / "corpora" / "stdlib"
    if (target / ".git").is_dir():
        return target
    shutil.rmtree(target, ignore_errors=True)
    ignore = shutil.ignore_patterns("site-packages", "__pycache__", "*.pyc")
    shutil.copytree(sysconfig.get_paths()["stdlib"], target, ignore=ignore, symlinks=True)
    commit_tree(target)
    return target


def ensure_repomix() -> Path:
    binary = OUT / "node" / "node_modules" / ".bin" / "repomix"
    if not binary.exists():
        (OUT / "node").mkdir(parents=True, exist_ok=True)
        run(["npm", "install", "--no-audit", "--no-fund", f"repomix@{REPOMIX_VERSION}"], cwd=OUT / "node")
    return binary


def ensure_gitingest() -> Path:
    venv = OUT / "gitingest-venv"
    binary = venv / "bin" / "gitingest"
    if not binary.exists():
        run([sys.executable, "-m", "venv", str(venv)])
        run([str(venv / "bin" / "pip"), "install", "-q", f"gitingest=={GITINGEST_VERSION}"])
    return binary


def timed(command: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS MB, exit code, combined output) measured by GNU time."""
    report = OUT / "time.txt"
    completed = subprocess.run(
        ["/usr/bin/time", "-o", str(report), "-f", "%e %M", *command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        errors="replace",
    )
    wall, peak_kb = report.read_text().strip().splitlines()[-1].split()
    return float(wall), int(peak_kb) / 1024, completed.returncode, completed.stdout + completed.stderr


def refactor_agent(corpus: str, repo: Path, server: str | None) -> list[Measurement]:
    label = "refactor-agent" + (" (exact)" if server else " (offline)")
    cache = OUT / "cache" / f"{corpus}-{'exact' if server else 'offline'}"
    shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    output, stats_file = OUT / f"{corpus}.refactor-agent.xml", OUT / f"{corpus}.refactor-agent.stats.json"
    # `python -m agent` from ROOT: the checkout being measured, whichever tree the venv was installed from.
    command = [sys.executable, "-m", "agent", "pack", str(repo), "--budget", str(BUDGET)]
    command += ["--output", str(output), "--stats", str(stats_file)] + (["--server", server] if server else [])
    measurements = []
    for phase in ("cold", "warm"):
        wall, peak, code, log = timed(command, cwd=ROOT, env=env)
        stats = json.loads(stats_file.read_text()) if code == 0 else {}
        if code != 0:
            print(log, file=sys.stderr)
        included = stats.get("files_full", 0) + stats.get("files_outline", 0) if stats else None
        measurements.append(
            Measurement(
                corpus=corpus,
                tool=f"{label} {phase}",
                wall_s=wall,
                peak_rss_mb=peak,
                files=included,
                tokens=stats.get("total_tokens"),
                counts=stats.get("counts", "failed"),
                exit_code=code,
                packer_s=round(sum(stats["elapsed_s"].values()), 2) if stats else None,
            )
        )
    return measurements


def _number(pattern: str, text: str) -> int | None:
    match = re.search(pattern, text)
    return int(match.group(1).replace(",", "")) if match else None


def repomix(corpus: str, repo: Path, binary: Path) -> Measurement:
    output = OUT / f"{corpus}.repomix.xml"
    wall, peak, code, log = timed([str(binary), "--style", "xml", "-o", str(output), "."], cwd=repo)
    return Measurement(
        corpus=corpus,
        tool="repomix",
        wall_s=wall,
        peak_rss_mb=peak,
        files=_number(r"Total Files:\s*([\d,]+)", log),
        tokens=_number(r"Total Tokens:\s*([\d,]+)", log),
        counts="o200k (tiktoken)",
        exit_code=code,
    )


def gitingest(corpus: str, repo: Path, binary: Path) -> Measurement:
    output = OUT / f"{corpus}.gitingest.txt"
    wall, peak, code, log = timed([str(binary), str(repo), "-o", str(output)], cwd=repo)
    summary = log
    tokens_match = re.search(r"Estimated tokens:\s*([\d.]+)([kM]?)", summary)
    tokens = None
    if tokens_match:
        tokens = int(float(tokens_match.group(1)) * {"": 1, "k": 1e3, "M": 1e6}[tokens_match.group(2)])
    return Measurement(
        corpus=corpus,
        tool="gitingest",
        wall_s=wall,
        peak_rss_mb=peak,
        files=_number(r"Files analyzed:\s*([\d,]+)", summary),
        tokens=tokens,
        # gitingest downloads its tiktoken model at run time; offline it reports no token count at all.
        counts="o200k (tiktoken)" if tokens is not None else "none (tiktoken model not downloadable offline)",
        exit_code=code,
    )


def table(measurements: list[Measurement]) -> str:
    lines = [
        "| corpus | tool | wall s | packer s | peak RSS MB | files included | tokens | counts |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for m in measurements:
        failed = "" if m.exit_code == 0 else f" (exit {m.exit_code})"
        tokens = f"{m.tokens:,}" if m.tokens is not None else "?"
        files = f"{m.files:,}" if m.files is not None else "?"
        packer = f"{m.packer_s:.2f}" if m.packer_s is not None else "–"
        cells = [m.corpus, m.tool + failed, f"{m.wall_s:.2f}", packer, f"{m.peak_rss_mb:.0f}", files, tokens, m.counts]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", help="llama-server URL for exact counts (default: offline estimates only)")
    parser.add_argument("--corpus", action="append", choices=["django", "sqlalchemy", "stdlib"])
    parser.add_argument("--checkout", action="append", type=Path, default=[], help="a git checkout, packed as it is")
    parser.add_argument("--skip-peers", action="store_true", help="only refactor-agent")
    parser.add_argument("--skip-gitingest", action="store_true", help="refactor-agent and repomix only")
    arguments = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    corpora = arguments.corpus or ([] if arguments.checkout else ["django", "sqlalchemy", "stdlib"])
    repomix_binary = None if arguments.skip_peers else ensure_repomix()
    gitingest_binary = None if arguments.skip_peers or arguments.skip_gitingest else ensure_gitingest()
    measurements: list[Measurement] = []
    built = [(corpus, stdlib_corpus() if corpus == "stdlib" else release_corpus(corpus)) for corpus in corpora]
    for corpus, repo in built + [(checkout.resolve().name, checkout.resolve()) for checkout in arguments.checkout]:
        measurements += refactor_agent(corpus, repo, None)
        if arguments.server:
            measurements += refactor_agent(corpus, repo, arguments.server)
        if repomix_binary is not None:
            measurements.append(repomix(corpus, repo, repomix_binary))
        if gitingest_binary is not None:
            measurements.append(gitingest(corpus, repo, gitingest_binary))
        print(table([m for m in measurements if m.corpus == corpus]), flush=True)
    (OUT / "pack.json").write_text(json.dumps([m.model_dump() for m in measurements], indent=1) + "\n")
    print()
    print(table(measurements))


if __name__ == "__main__":
    main()
