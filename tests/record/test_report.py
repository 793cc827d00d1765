"""report.md and report.html: parsed back from the files, and the HTML as a real headless browser renders it."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from agent.protocol.records import CompactionRecord, GateEvidence, KindTally, RepoFates, RunSummary, TaskSummary
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
    reviewer, _, performance = report.partition("## Performance")
    rows = [line for line in reviewer.splitlines() if line.startswith(("| 1 |", "| 2 |"))]
    assert rows == [
        "| 1 | regressed | Rename compute_area \\| to area \\<now\\> | 3→2 passed −1 | 2 +3/-1 |",
        "| 2 | failed | Nothing to do | \\- | \\- |",
    ]
    assert "| # | verdict | task | tests Δ | files ± |" in reviewer
    assert "- 1 REGRESSED (1 test): tests/t.py::test\\_\\<x\\>" in reviewer, "why, under the table"
    assert "- 2 failed: internal error: boom" in reviewer
    assert "Tests: 3 passed → 2 passed, 1 failed" in report
    assert "regressed (1):\n\n- `tests/t.py::test_<x>`" in report
    assert "refactor-agent/r/1-rename | 0123456789ab |" in performance, "the operator's columns, apart"
    assert "prompt tokens" not in reviewer


def test_the_report_shows_compactions_per_task(tmp_path: Path) -> None:
    journal, summary, _ = _run_with_two_tasks(tmp_path)
    summary.tasks[0].compactions = [
        CompactionRecord(turn=14, stage="stubs", reason="threshold", tokens_before=3_512, tokens_after=2_341),
        CompactionRecord(turn=21, stage="summary", reason="overflow", tokens_before=4_527, tokens_after=1_980),
    ]
    journal.write_summary(summary)
    report = (journal.directory / "report.md").read_text()
    performance = report.split("## Performance")[1].splitlines()  # the operator's columns
    header = next(line for line in performance if line.startswith("| # |"))
    column = header.split(" | ").index("compactions")
    rows = [line.split(" | ") for line in performance if line.startswith(("| 1 |", "| 2 |"))]
    assert [row[column] for row in rows] == ["2", "0"]
    assert "- turn 14: older results stubbed (past the threshold), 3,512 → 2,341 tokens" in report
    assert "- turn 21: older turns summarised (the server's window overflowed), 4,527 → 1,980 tokens" in report
    page = (journal.directory / "report.html").read_text()
    assert "turn 21: older turns summarised (the server&#x27;s window overflowed), 4,527 → 1,980 tokens" in page


def test_a_nights_report_says_what_became_of_its_tasks_and_what_gc_removed(tmp_path: Path) -> None:
    journal, summary, _ = _run_with_two_tasks(tmp_path)
    journal.write_summary(summary)
    one_off = (journal.directory / "report.md").read_text()
    assert "since last night" not in one_off and "Removed at the night" not in one_off  # a one-off run: none
    summary.fates = [
        RepoFates(
            repo="/srv/repo",
            default_branch="main",
            base="b" * 40,
            previous_base="a" * 40,
            rebased=["refactor-agent/nightly/units"],
            retired=["refactor-agent/nightly/<b>rename</b>"],
            failing={"refactor-agent/nightly/hints": 3},
            kinds=[KindTally(kind="rename", merged=1, discarded=1, waiting=2), KindTally(kind="docs", waiting=1)],
        )
    ]
    summary.removed = ["removed baseline 8cd3.json (384 B): older than 14 days", "gc: removed 1 baseline (384 B)"]
    journal.write_summary(summary)
    report = (journal.directory / "report.md").read_text()
    block = report.partition(f"**since last night: /srv/repo: main at {'b' * 12} (last night {'a' * 12})**")[2]
    assert block.split("\n\n## Task 1")[0].strip().splitlines() == [
        "- rebased: refactor-agent/nightly/units",
        "- retired (merged): refactor-agent/nightly/\\<b\\>rename\\</b\\>",
        "- still failing for 3 nights: refactor-agent/nightly/hints",
        "- kind rename: 1 merged, 1 discarded, 2 waiting; merge rate 50%",
        "- kind docs: 0 merged, 0 discarded, 1 waiting; merge rate -",
    ]
    removed = report.partition("## Removed at the night's end (gc)")[2].strip().splitlines()
    assert removed == [f"- {line}" for line in summary.removed]
    page = (journal.directory / "report.html").read_text()
    assert "<li>retired (merged): refactor-agent/nightly/&lt;b&gt;rename&lt;/b&gt;</li>" in page
    assert "<li>kind rename: 1 merged, 1 discarded, 2 waiting; merge rate 50%</li>" in page
    assert "<li>gc: removed 1 baseline (384 B)</li>" in page


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


def _rendered_dom(page: Path, *flags: str) -> str:
    """The DOM headless chromium made of the page."""
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is installed by scripts/test.sh"
    return subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", *flags, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=CHROMIUM_TIMEOUT_S,
        check=True,
    ).stdout


@pytest.mark.browser
def test_html_report_renders_in_a_real_browser(tmp_path: Path) -> None:
    journal, summary, _ = _run_with_two_tasks(tmp_path)
    journal.write_summary(summary)
    rendered = _rendered_dom(journal.directory / "report.html")
    page = _Page()
    page.feed(rendered)
    assert [row[:3] for row in page.rows] == [
        ["1", "regressed", "Rename compute_area | to area <now>"],
        ["2", "failed", "Nothing to do"],
    ]
    assert page.details == 1 and page.open_details == 0, "one diff, collapsed until asked for"
    assert page.inserted_spans == 3 + 2, "Pygments marks the 3 added lines and the 2 '+++' file headers"
    assert page.scripts_or_links == 0, "self-contained: nothing to fetch"
    assert "<b>callers</b>" not in rendered and "&lt;b&gt;callers&lt;/b&gt;" in rendered
    assert "<code>tests/t.py::test_&lt;x&gt;</code>" in rendered


def _night_of_four(tmp_path: Path) -> RunJournal:
    """A night as a reviewer meets it: verified, regressed, failed and no_changes, long names and paths."""
    diff = _real_diff(tmp_path)
    journal = RunJournal(tmp_path / "runs", "20261201-232754-24b5")
    journal.append_patch("task 1: Rename", diff.encode(), total_bytes=len(diff), full_change=None)
    branch = "refactor-agent/20261201-232754-24b5/{}-a-long-slug-made-from-the-task-text-of-this-task"
    evidence = {"baseline": "3 passed, 1 failed", "base_commit": "b1451e7546aa"}
    summary = RunSummary(
        run_id=journal.run_id, repo="/srv/" + "deeply/nested/" * 8 + "repo", model="m", server_url="http://x/v1"
    )
    summary.tasks = [
        TaskSummary(
            index=1,
            task="Rename compute_area to area everywhere, in every module, test and document of the package",
            status="committed",
            verdict="verified",
            reason="the model called finish",
            base_commit=evidence["base_commit"],
            tests=GateEvidence(baseline=evidence["baseline"], final="3 passed, 1 failed", still_failing=["t::k"]),
            branch=branch.format(1),
            commit="2ac2ce436883aaaa",
            metrics=summarize([]),
        ),
        TaskSummary(
            index=2,
            task="Make perimeter faster",
            status="committed",
            verdict="regressed",
            reason="gate: 1 test regressed",
            base_commit=evidence["base_commit"],
            tests=GateEvidence(
                baseline=evidence["baseline"],
                final="2 passed, 2 failed",
                regressed=["tests/test_geometry.py::test_perimeter_of_a_very_long_parametrised_case[" + "x" * 80 + "]"],
                failures={"tests/test_geometry.py::test_perimeter": "assert 7 == 10"},
                still_failing=["t::k"],
                rounds=[1, 1, 1],
            ),
            branch=branch.format(2),
            commit="65285b3adf34bbbb",
        ),
        TaskSummary(
            index=3,
            task="Add type hints to describe",
            status="failed",
            verdict="failed",
            reason="reached --max-turns 5 without finish",
            rejected_calls={"str_replace": 4},
            last_error="old occurs 0 times in 'shapes/report.py'; it must occur exactly once (add surrounding lines)",
        ),
        TaskSummary(
            index=4,
            task="Document the geometry module",
            status="no_changes",
            verdict="no_changes",
            reason="the model answered without calling a tool",
            summary="The module is already documented well enough; I see nothing to change." + "y" * 200,
        ),
    ]
    journal.write_summary(summary)
    return journal


MEASURE_PAGE = """<!DOCTYPE html><html><body style="margin:0">
<iframe id="f" src="report.html" style="width:{width}px;height:900px;border:0"></iframe>
<script>
document.getElementById("f").addEventListener("load", () => {{
  const d = document.getElementById("f").contentDocument, t = d.querySelector("table.tasks");
  document.body.setAttribute("data-measure", JSON.stringify({{client: d.documentElement.clientWidth,
    tableRight: Math.round(t.getBoundingClientRect().right), docScroll: d.documentElement.scrollWidth,
    verdicts: [...t.querySelectorAll("span.verdict")].map(s => s.textContent),
    why: [...d.querySelectorAll("p.why")].map(p => p.textContent)}}));
}});
</script></body></html>
"""


@pytest.mark.browser
@pytest.mark.parametrize("width", [390, 1400])
def test_the_task_table_fits_a_phone_and_a_desktop(tmp_path: Path, width: int) -> None:
    """Headless chromium's window is never narrower than 500 px: an iframe gives the page a real 390 px viewport."""
    journal = _night_of_four(tmp_path)
    measure = journal.directory / "measure.html"
    measure.write_text(MEASURE_PAGE.format(width=width))
    # The measuring page reads the report's DOM through its iframe: file:// access, and time for the load event.
    dom = _rendered_dom(
        measure, "--allow-file-access-from-files", "--virtual-time-budget=5000", "--window-size=1600,1000"
    )
    found = re.search(r'data-measure="([^"]*)"', dom)
    assert found, dom[:2000]
    measured = json.loads(html.unescape(found.group(1)))
    assert measured["client"] <= width
    assert measured["tableRight"] <= measured["client"], measured
    assert measured["docScroll"] <= measured["client"], measured
    assert measured["verdicts"] == ["verified", "regressed", "failed", "no_changes"]
    assert [line.split(":")[0] for line in measured["why"]] == ["2 REGRESSED (1 test)", "3 failed", "4 no_changes"]
    assert (
        "3 failed: reached --max-turns 5 without finish; 4 rejected tool calls (str_replace 4); last: "
        in (measured["why"][1])
    )
    assert measured["why"][2].startswith('4 no_changes: the model said: "The module is already documented well')
