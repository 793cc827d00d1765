"""bench/v4_acceptance.py on the embedded server with DeepSeek V4's template (a short task that passes a low
threshold once): it runs, says what it measured on, and its figures are the ones the saved-prefix and compaction
promises make."""

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
        # 4 turns of about 260 tokens from 3,900: the 4th request would pass 53.5% of the 8,192-token window.
        [sys.executable, str(BENCH), "--turns", "4", "--compact-at", "0.535", "--json", str(out)],
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
    assert template["template_status"] == "ok" and "DeepSeek V4 Flash 0731" in template["template"], template
    assert template["thinking_status"] == "ok" and template["effort_preamble"], template
    assert result["reuse_probe"]["status"] == "ok", result["reuse_probe"]
    turns = result["turns"]
    reuse = [turn["reuse"] for turn in turns]
    assert reuse[0] == "first" and reuse.count("compacted") == result["compactions"] == 1, turns
    assert set(reuse[1:]) == {"exact", "compacted"}, turns
    assert result["divergences"] == 0 and result["checkpoint_hits"] == 0
    restore = result["restore"]
    shared = restore["shared_prefix_tokens"]
    assert restore["saved_tokens"] == shared and turns[0]["cached_tokens"] == shared, restore
    compaction = result["compaction"]
    assert compaction["tokens_after"] < compaction["tokens_before"], compaction
    assert compaction["next_cached"] >= shared, compaction  # the request after it still starts with the prefix
    assert restore["file_bytes"] > 0
    for first in restore["first_requests"]:  # after an erase, after a restart: the file gives all of the prefix
        assert first["restored_tokens"] == shared and first["cached_tokens"] >= shared, first
    assert result["dspark"].startswith("not measured")
    for row in ("| turn | prompt tokens | cached |", "| next task's first request, after |", "| a restart |"):
        assert row in done.stdout
