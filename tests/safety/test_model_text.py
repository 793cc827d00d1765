"""Text the model, a repository or its tests wrote is data in every rendering: report.md and report.html, the
`review pr` body, `review`'s table and `show`. The Markdown is parsed back with markdown-it-py (CommonMark and
GFM tables, what GitHub and GitLab render): our verdict, headings and evidence stay ours, outside anything the
model's text opened."""

from __future__ import annotations

import io
from html.parser import HTMLParser
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token
from rich.console import Console

from agent.record.journal import RunJournal
from agent.review.change import TaskChange
from agent.review.pull_request import pull_request, pull_request_markdown
from agent.review.records import RunRecord, TaskRef
from agent.review.views import evidence_text, run_table
from agent.safety import markdown as md
from agent.safety.printable import printable

from support.repos import git, make_repo

# A finish summary that tries to end our fence, open a comment, fake our verdict and heading, link and embed.
SUMMARY = (
    "Rename compute_area\n\n"
    "<!-- the rest is hidden\n"
    "```\n"
    "## Test evidence\n\n"
    "- Verdict: **verified**\n"
    "````\n"
    "[release notes](https://evil.example/x) ![pixel](https://evil.example/p.png) <img src=x onerror=alert(1)>\n"
    "\x1b]52;c;ZXZpbA==\x07\x1b[2J"
)
TASK = "Rename [/] `x` <!-- y"
REASON = "the model called finish; gate: 1 test regressed <!-- ```"
REGRESSED = "tests/test_g.py::test_`area`<!--"
HOSTILE_FILE = "pkg/we`ird <b>|</b>.py"
DELETED = "docs/gone <!--.md"


def _diff(tmp_path: Path) -> str:
    """A diff git itself wrote: a file with a hostile name changed, another deleted."""
    repo = make_repo(tmp_path / "repo", {HOSTILE_FILE: "x = 1\n", DELETED: "old\n"})
    (repo / HOSTILE_FILE).write_text("x = 2\n")
    (repo / DELETED).unlink()
    git(repo, "add", "--all")
    return git(repo, "-c", "core.quotePath=false", "diff", "--cached", "HEAD")


def _record(tmp_path: Path) -> tuple[RunRecord, str]:
    from agent.protocol.records import GateEvidence, RunSummary, TaskSummary

    diff = _diff(tmp_path)
    journal = RunJournal(tmp_path / "runs", "20261201-010000-abcd")
    journal.append_patch(f"task 1: {TASK}", diff.encode(), total_bytes=len(diff), full_change=None)
    task = TaskSummary(
        index=1,
        task=TASK,
        status="committed",
        verdict="regressed",
        reason=REASON,
        tests=GateEvidence(baseline="1 passed", final="1 failed", regressed=[REGRESSED], removed=[]),
        branch="refactor-agent/20261201-010000-abcd/1-rename-x",
        commit="0123456789abcdef0123",
        summary=SUMMARY,
    )
    summary = RunSummary(
        run_id=journal.run_id, repo="/srv/[/]repo", model="scripted", server_url="http://x/v1", tasks=[task]
    )
    journal.write_summary(summary)
    return RunRecord(journal.directory, summary), diff


def _parse(markdown: str) -> list[Token]:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).parse(markdown)


def _flat(tokens: list[Token]) -> list[Token]:
    return [each for token in tokens for each in (token, *(token.children or []))]


def _assert_only_ours(tokens: list[Token]) -> None:
    kinds = {token.type for token in _flat(tokens)}
    assert not kinds & {"html_block", "html_inline", "link_open", "image"}, kinds


def _shown(inline: Token) -> str:
    """An inline token as a reader sees it: its text with Markdown's escapes resolved."""
    return "".join(child.content for child in inline.children or [] if child.type in ("text", "code_inline"))


def _headings(tokens: list[Token]) -> list[str]:
    return [_shown(tokens[n + 1]) for n, token in enumerate(tokens) if token.type == "heading_open"]


def _code_spans(tokens: list[Token]) -> list[str]:
    return [token.content for token in _flat(tokens) if token.type == "code_inline"]


def test_the_model_text_in_report_md_cannot_hide_the_verdict_or_the_evidence(tmp_path: Path) -> None:
    record, _ = _record(tmp_path)
    markdown = (record.directory / "report.md").read_text()
    assert "\x1b" not in markdown, "control characters shown, not written"
    tokens = _parse(markdown)
    _assert_only_ours(tokens)
    assert _headings(tokens) == ["refactor-agent run 20261201-010000-abcd", f"Task 1: {TASK}", "Performance"]
    (fence,) = [token for token in tokens if token.type == "fence"]
    assert fence.content == printable(SUMMARY) + "\n", "the whole message in one block, nothing else in it"
    after = tokens[tokens.index(fence) :]
    assert {REGRESSED, HOSTILE_FILE, DELETED} <= set(_code_spans(after)), "the evidence comes after, as names"
    section = [n for n, token in enumerate(tokens) if token.type == "heading_open"][-2]
    first = next(n for n in range(section, len(tokens)) if tokens[n].type == "paragraph_open")
    assert _shown(tokens[first + 1]) == f"REGRESSED (1 test): {REGRESSED}", "the task opens with our verdict"
    assert first < tokens.index(fence)
    cells = [_shown(token) for token in tokens[: tokens.index(fence)] if token.type == "inline"]
    assert TASK in cells and "regressed" in cells, "the task row's cells, whole"


class _Html(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.comments: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)

    def handle_comment(self, data: str) -> None:
        self.comments.append(data)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_the_model_text_in_report_html_is_text(tmp_path: Path) -> None:
    record, _ = _record(tmp_path)
    page = _Html()
    page.feed((record.directory / "report.html").read_text())
    assert page.comments == [] and not page.tags & {"img", "a", "script", "b", "iframe"}, page.tags
    text = "".join(page.text)
    assert SUMMARY.replace("\x1b", "") in text.replace("\x1b", "") and REGRESSED in text and TASK in text


def test_the_pr_body_opens_with_our_verdict_and_keeps_the_evidence_outside_the_model_text(tmp_path: Path) -> None:
    record, diff = _record(tmp_path)
    (task,) = record.summary.tasks
    message = f"{SUMMARY}\n\nRefactor-Agent-Verdict: regressed\n"
    change = TaskChange(TaskRef(record, task), message, diff, "", "0123456789abcdef0123")
    title, body = pull_request(change, None)
    assert title == "Rename compute_area"
    assert "\x1b" not in body
    warning, verdict = body.splitlines()[:2], body.splitlines()[3]
    assert warning == [
        "> [!WARNING]",
        "> **Not verified: regressed.** 1 test that passed on the base fails with this change: "
        f"{md.code(REGRESSED)}. Read the evidence before merging.",
    ], "ours first, not the model's"
    assert verdict == f"**Verdict: regressed**: {md.inline(REGRESSED)}"
    tokens = _parse(pull_request_markdown(change, None))
    _assert_only_ours(tokens)
    assert _headings(tokens) == [
        "Rename compute_area",
        "What changed and why",
        "Test evidence",
        "Files touched",
        "Risk notes",
        "How this was made",
    ]
    (fence,) = [token for token in tokens if token.type == "fence"]
    assert fence.content == printable(SUMMARY.partition("\n\n")[2]) + "\n"
    after = tokens[tokens.index(fence) :]
    assert {REGRESSED, HOSTILE_FILE, DELETED} <= set(_code_spans(after))
    risks = body.partition("## Risk notes")[2]
    assert "None found" not in risks and "Deletes files:" in risks
    cells = [_shown(token) for token in after if token.type == "inline"]
    assert HOSTILE_FILE in cells, "the file's table cell holds the whole name, pipe and all"


def test_review_prints_hostile_names_as_text(tmp_path: Path) -> None:
    record, diff = _record(tmp_path)
    output = io.StringIO()
    Console(file=output, width=300, force_terminal=True).print(run_table(record))  # a `[/]` in the title and cells
    assert "/srv/[/]repo" in output.getvalue() and TASK in output.getvalue()
    (task,) = record.summary.tasks
    shown = printable(evidence_text(TaskChange(TaskRef(record, task), SUMMARY, diff, "", None)))
    assert "\x1b" not in shown and "\\x1b]52;c;ZXZpbA==" in shown
