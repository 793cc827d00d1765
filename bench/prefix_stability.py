"""How much of the packed repository stays byte-identical from one commit to the next: path order against churn order.

    .venv/bin/python bench/prefix_stability.py [--server URL] [--commits 30]

Histories, both offline-friendly:
- django: the source releases 5.1, 5.1.1, ... 5.1.7 from PyPI (`pip download`, cached in bench/out/downloads),
  committed one after the other into one repository (a release per commit: far more change per step than a real
  commit, so this is the hard case);
- refactor-agent: the last --commits first-parent commits of this repository's own history (real commits).
Each commit is packed with a 1,000,000-token budget (offline estimates: the selection is the same for both orders),
once per order. For each pair of consecutive commits the common prefix of the two texts is measured, and with
--server its share in tokens of the later text (the server's /tokenize); without a server the share is in bytes.
A prefill after the commit changes can reuse exactly that prefix from a saved or resident KV cache.
--budget 0 packs whole repositories (only the order then decides).
Writes bench/out/prefix_stability_BUDGET.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
sys.path.insert(0, str(ROOT))

from agent.packing import PackOptions, pack_repository  # noqa: E402
from agent.server.api import LlamaServerAPI  # noqa: E402

BUDGET = 1_000_000
DJANGO_VERSIONS = ("5.1", "5.1.1", "5.1.2", "5.1.3", "5.1.4", "5.1.5", "5.1.6", "5.1.7")
IDENTITY = ["-c", "user.name=bench", "-c", "user.email=bench@example.com"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def _archive(downloads: Path, version: str) -> Path | None:
    """The release's sdist: older ones are named Django-X.tar.gz, newer ones django-X.tar.gz."""
    wanted = f"django-{version}.tar.gz"
    return next((path for path in downloads.iterdir() if path.name.lower() == wanted), None)


def django_history() -> tuple[Path, list[str]]:
    target = OUT / "corpora" / "django-history"
    downloads = OUT / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    if not (target / ".git").is_dir():
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        git(target, "init", "-q")
        for version in DJANGO_VERSIONS:
            archive = _archive(downloads, version)
            if archive is None:
                pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q"]
                subprocess.run([*pip, "-d", str(downloads), f"django=={version}"], check=True)
                archive = _archive(downloads, version)
                assert archive is not None
            for entry in target.iterdir():
                if entry.name != ".git":
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            with tarfile.open(archive) as tar:
                members = tar.getmembers()
                for member in members:
                    member.name = member.name.split("/", 1)[1] if "/" in member.name else ""
                tar.extractall(target, members=[member for member in members if member.name], filter="data")
            git(target, "add", "-A")
            git(target, *IDENTITY, "commit", "-q", "-m", f"Django {version}")
    commits = git(target, "rev-list", "--reverse", "--all").split()  # HEAD may be left detached
    return target, commits


def own_history(count: int) -> tuple[Path, list[str]]:
    target = OUT / "corpora" / "refactor-agent-history"
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(target)], check=True)
    commits = git(target, "rev-list", "--first-parent", "-n", str(count), "HEAD").split()[::-1]
    return target, commits


def common_prefix(first: str, second: str) -> int:
    """Length of the common prefix, by halving (comparing slices runs in C)."""
    low, high = 0, min(len(first), len(second))
    while low < high:
        middle = (low + high + 1) // 2
        if first[:middle] == second[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def measure(name: str, repo: Path, commits: list[str], api: LlamaServerAPI | None, budget: int | None) -> list[dict]:
    rows = []
    for order in ("path", "churn"):
        cache = OUT / "stability-cache" / name / order
        shutil.rmtree(cache, ignore_errors=True)
        previous: str | None = None
        for commit in commits:
            git(repo, "checkout", "-q", "--detach", commit)
            text = pack_repository(repo, PackOptions(budget_tokens=budget, order=order, cache_dir=cache)).text
            if previous is not None:
                shared = common_prefix(previous, text)
                if api is not None:
                    total, kept, unit = len(api.tokenize(text)), len(api.tokenize(text[:shared])), "tokens"
                else:
                    total, kept, unit = len(text.encode()), len(text[:shared].encode()), "bytes"
                rows.append(
                    {"history": name, "order": order, "commit": commit, "kept": kept, "total": total, "unit": unit}
                )
                print(json.dumps(rows[-1]), flush=True)
            previous = text
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", help="llama-server for token counts of the shared prefixes")
    parser.add_argument("--commits", type=int, default=30)
    parser.add_argument("--budget", type=int, default=BUDGET, help="0: no budget, the whole repository")
    parser.add_argument("--history", action="append", choices=["django", "refactor-agent"])
    arguments = parser.parse_args()
    api = LlamaServerAPI(arguments.server, timeout_s=600.0) if arguments.server else None
    rows: list[dict] = []
    for name in arguments.history or ["django", "refactor-agent"]:
        repo, commits = django_history() if name == "django" else own_history(arguments.commits)
        rows += measure(name, repo, commits, api, arguments.budget or None)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"prefix_stability_{arguments.budget}.json").write_text(json.dumps(rows, indent=2))
    print("| history | budget | steps | order | mean share kept | median | min | max |")
    print("|---|---:|---:|---|---:|---:|---:|---:|")
    for name in dict.fromkeys(row["history"] for row in rows):
        for order in ("path", "churn"):
            shares = [row["kept"] / row["total"] for row in rows if row["history"] == name and row["order"] == order]
            mean, median = statistics.mean(shares), statistics.median(shares)
            print(
                f"| {name} | {arguments.budget or 'whole'} | {len(shares)} | {order} | {mean:.1%} | {median:.1%} "
                f"| {min(shares):.1%} | {max(shares):.1%} |"
            )


if __name__ == "__main__":
    main()
