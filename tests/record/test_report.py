"""report.md and report.html: parsed back from the files, and the HTML as a real headless browser renders it."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from agent.protocol.records import GateEvidence, RunSummary, TaskSummary
from agent.record.journal import RunJournal
from agent.record.metrics import summarize
from agent.record.report import file_changes, split_patch

from support.repos import git, make_repo

CHROMIUM_TIMEOUT_S = 120


def _real_diff(tmp_path: Path) -> str:
    """A diff git itself wrote: one edited file and one new one."""
    repo = make_repo(tmp_path / "repo")
    geometry = repo / "pkg" / "geometry.py"
    geometry.write_text(geometry.read_text().replace("compute_area", "area"))
    (repo / "pkg" / "new.py").write_text("X = 1\nY = 2\n")
    git(repo, "add", "--all")
    return git(repo, "diff", "--cached", "HEAD")


def _run_with_two_tasks(tmp_path: Path) -> tuple[RunJournal, RunSummary, str]:
    diff = _real_diff(tmp_path)
    journal = RunJournal(tmp_path / "runs", "20261201-010000-abcd")
    journal.append_patch(
        "task 1: Rename compute_area | to area <now>", diff.encode(), total_bytes=len(diff), full_change=None
    )
    journal.append_patch("task 2: Nothing to do", b"", total_bytes=0, full_change=None)
    summary = RunSummary(run_id=journal.run_id, repo="/srv/repo", model="deepseek-v4-flash", server_url="http://x/v1")
    summary.tasks = [
        TaskSummary(
            index=1,
            task="Rename compute_area | to area <now>",
            status="committed",
            verdict="regressed",
            reason="the model called finish; gate: 1 test regressed",
            tests=GateEvidence(baseline="3 passed", final="2 passed, 1 failed", regressed=["tests/t.py::test_<x>"]),
            branch="refactor-agent/r/1-rename",
            commit="0123456789abcdef",
            summary="Rename compute_area to area\n\n<b>callers</b> follow",
            metrics=summarize([]),
        ),
        TaskSummary(index=2, task="Nothing to do", status="failed", verdict="failed", reason="internal error: boom"),
    ]
    return journal, summary, diff


def test_patch_is_split_per_task_and_files_are_counted(tmp_path: Path) -> None:
    journal, _, diff = _run_with_two_tasks(tmp_path)
    diffs = split_patch((journal.directory / "patch.diff").read_text())
    assert diffs == {1: diff.strip("\n"), 2: ""}
    changes = {change.path: (change.added, change.removed) for change in file_changes(diffs[1])}
    assert changes == {"pkg/geometry.py": (1, 1), "pkg/new.py": (2, 0)}


def test_markdown_report_has_a_row_per_task_and_escapes_cells(tmp_path: Path) -> None:
    journal, summary, _ = _run_with_two_tasks(tmp_path)
    journal.write_summary(summary)
    report = (journal.directory / "report.md").read_text()
    rows = [line for line in report.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(rows) == 2
    assert "Rename compute_area \\| to area" in rows[0] and "+3/-1" in rows[0] and "| regressed |" in rows[0]
    assert "| 3 passed → 2 passed, 1 failed | 1/0/0 |" in rows[0]
    assert "| failed |" in rows[1]
    assert "failed: internal error: boom" in report
    assert "regressed (1):\n\n- `tests/t.py::test_<x>`" in report


class _Page(HTMLParser):
    """What a person sees, reduced to what the test checks: rows, their cells, diff blocks, highlighted lines."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.details = 0
        self.open_details = 0
        self.inserted_spans = 0
        self.scripts_or_links = 0
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "tr" and attributes.get("class") == "task-row":
            self.rows.append([])
        elif tag == "td" and self.rows:
            self._cell = []
        elif tag == "details":
            self.details += 1
            self.open_details += "open" in attributes
        elif tag == "span" and attributes.get("class") == "gi":
            self.inserted_spans += 1
        elif tag in ("script", "link") or (tag == "img" and attributes.get("src")):
            self.scripts_or_links += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


@pytest.mark.browser
def test_html_report_renders_in_a_real_browser(tmp_path: Path) -> None:
    journal, summary, _ = _run_with_two_tasks(tmp_path)
    journal.write_summary(summary)
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is installed by scripts/test.sh"
    rendered = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            (journal.directory / "report.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=CHROMIUM_TIMEOUT_S,
        check=True,
    ).stdout
    page = _Page()
    page.feed(rendered)
    assert [row[:3] for row in page.rows] == [
        ["1", "Rename compute_area | to area <now>", "regressed"],
        ["2", "Nothing to do", "failed"],
    ]
    assert page.details == 1 and page.open_details == 0, "one diff, collapsed until asked for"
    assert page.inserted_spans == 3 + 2, "Pygments marks the 3 added lines and the 2 '+++' file headers"
    assert page.scripts_or_links == 0, "self-contained: nothing to fetch"
    assert "<b>callers</b>" not in rendered and "&lt;b&gt;callers&lt;/b&gt;" in rendered
    assert "<code>tests/t.py::test_&lt;x&gt;</code>" in rendered
