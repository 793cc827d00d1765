"""A worker process for tag extraction: tree-sitter holds the GIL while parsing, so cores need processes.

Reads {"repo": dir, "jobs": [[key, language, path, encoding], ...]} as JSON on stdin and writes
[[key, tags], ...] as JSON on stdout. Run as `python -m agent.packing.tags_worker`; a plain subprocess, not
multiprocessing, so the parent's __main__ and threads never matter.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from agent.packing.classify import read_bytes_nofollow
from agent.packing.listing import ListedPath
from agent.packing.tags import extract_tags


def extract_job(repo_dir: Path, language: str, path: str, encoding: str) -> list[object]:
    data = read_bytes_nofollow(repo_dir, ListedPath(raw=os.fsencode(path), mode=None))
    return extract_tags(language, data.decode(encoding)).to_json()


def main() -> None:
    request = json.load(sys.stdin)
    repo_dir = Path(request["repo"])
    results = [
        [key, extract_job(repo_dir, language, path, encoding)] for key, language, path, encoding in request["jobs"]
    ]
    json.dump(results, sys.stdout, separators=(",", ":"))


if __name__ == "__main__":
    main()
