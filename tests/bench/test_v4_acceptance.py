"""bench/v4_acceptance.py on the embedded server with DeepSeek V4's template (a short task): it runs, says what it
measured on, and its figures are the ones the saved-prefix promises make."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "v4_acceptance.py"


@pytest.mark.llama_server
def test_the_acceptance_bench_runs_on_the_embedded_server_with_v4s_template(tmp_path: Path, llama_binary: Path) -> None:
    out = tmp_path / "v4.json"
    environment = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(BENCH), "--turns", "3", "--json", str(out)],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("embedded: SmolLM2-135M rendering DeepSeek V4 Flash 0731's template"), done.stdout
    result = json.loads(out.read_text())
    assert result["mode"] == "embedded"
    assert result["ended"] == "stopped: the model answered without calling a tool"  # the script's plain answer
    template = result["template"]
    assert template["v4_flash_0731"] and template["thinking"] and template["effort_preamble_chars"] > 0, template
    turns = result["turns"]
    assert [turn["reuse"] for turn in turns] == ["first", "exact", "exact"], turns
    assert result["divergences"] == 0 and result["checkpoint_hits"] == 0
    restore = result["restore"]
    shared = restore["shared_prefix_tokens"]
    assert restore["saved_tokens"] == shared and turns[0]["cached_tokens"] == shared, restore
    assert restore["file_bytes"] > 0
    for first in restore["first_requests"]:  # after an erase, after a restart: the file gives all of the prefix
        assert first["restored_tokens"] == shared and first["cached_tokens"] >= shared, first
    assert result["dspark"].startswith("not measured")
    for row in ("| turn | prompt tokens | cached |", "| next task's first request, after |", "| a restart |"):
        assert row in done.stdout
