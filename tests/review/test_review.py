"""`refactor-agent review` on real git repositories and runs made by really running the runner (the in-process
scripted model, the real Docker sandbox): listing, the task table, show, pr, push, rebase, discard, bad input.

One night is run once per module; every test works on its own copy of the repository and the runs directory.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from typer.testing import CliRunner

import agent
from agent.cli import app
from agent.protocol.config import NightConfig, RunConfig
from agent.protocol.model import RetriesExhausted
from agent.protocol.records import RunSummary

from support.repos import SAMPLE_FILES, checkout_fingerprint, make_repo
from support.scripted_model import ScriptedModel, run_in_process
from support.scripted_server import Reply

pytestmark = pytest.mark.docker

NIGHT = "20261201-013000-a1b2"
LATER = "20261201-020000-c3d4"
DOCSTRING = '"""Area of a rectangle."""'
KNOWN_BUG = "tests/test_known_bug.py::test_known_bug"
BRANCH_1 = f"refactor-agent/{NIGHT}/1-document-the-area-function"
BRANCH_2 = f"refactor-agent/{NIGHT}/2-reword-the-area-docstring"
BRANCH_3 = f"refactor-agent/{NIGHT}/3-break-the-area"
LATER_BRANCH = f"refactor-agent/{LATER}/1-look-around"
LOST = "model server failed 2 times, last: APIConnectionError: Connection error."
MISSING_TEXT = "old occurs 0 times in 'pkg/report.py'"
ANSWER = "The module is already documented well enough; I see nothing to change."
# An escape sequence the model wrote (clear the screen, retitle the window): text for the reviewer, never codes.
HOSTILE_LINE = "# \x1b[2J\x1b]0;owned\x07"
BROKEN_GEOMETRY = (
    f'def compute_area(width, height):\n    """Area of a rectangle."""\n    return width + height\n{HOSTILE_LINE}\n'
)
SHOWN_HOSTILE_LINE = "# \\x1b[2J\\x1b]0;owned\\x07"


def finish(summary: str) -> Reply:
    return Reply(tool_calls=[("finish", {"summary": summary})])


NIGHT_TASKS = ["Document the area function", "Reword the area docstring", "Break the area", "Lose the server"]
# Run with --max-turns 3: rejected tool calls until the turns are spent, then a plain answer.
SHORT_TASKS = ["Type the report", "Document the geometry module"]
NIGHT_SCRIPT = [
    # 1: verified, touching a test, a configuration file, a deletion and a file too large to commit.
    Reply(
        tool_calls=[
            (
                "str_replace",
                {
                    "path": "pkg/geometry.py",
                    "old": DOCSTRING,
                    "new": '"""Area of a rectangle, width times height."""',
                },
            ),
            (
                "create_file",
                {
                    "path": "tests/test_docs.py",
                    "content": "from pkg.geometry import compute_area\n\n\ndef test_doc():\n"
                    "    assert 'width times height' in compute_area.__doc__\n",
                },
            ),
            ("str_replace", {"path": "pytest.ini", "old": "[pytest]\n", "new": "[pytest]\ntestpaths = tests\n"}),
            ("bash", {"command": "rm NOTES.txt"}),
            ("create_file", {"path": "big.txt", "content": "x" * 2000}),
        ]
    ),
    finish("Document compute_area\n\nThe docstring says what the area is; a test checks it."),
    # 2: verified, on the same line as 1: the two conflict with each other.
    Reply(tool_calls=[("str_replace", {"path": "pkg/geometry.py", "old": DOCSTRING, "new": '"""The area."""'})]),
    finish("Reword the area docstring"),
    # 3: regressed: broken, and never repaired in the two repair rounds.
    Reply(tool_calls=[("create_file", {"path": "pkg/geometry.py", "content": BROKEN_GEOMETRY})]),
    finish("Break the area"),
    finish("done"),
    finish("really done"),
    # 4: failed: the server stopped answering.
    RetriesExhausted(LOST),
    # 5: failed: three rejected calls, --max-turns 3.
    *[Reply(tool_calls=[("str_replace", {"path": "pkg/report.py", "old": "no such text", "new": "x"})])] * 3,
    # 6: no_changes: an answer, no tool call.
    Reply(content=ANSWER),
]


def _run(repo: Path, runs_dir: Path, run_id: str, tasks: list[str], script: list, short: list[str] = ()) -> None:
    config = RunConfig(repo=repo, tasks=tasks, runs_dir=runs_dir, max_turns=10, max_file_bytes=1000)
    groups = [config, *([config.model_copy(update={"tasks": list(short), "max_turns": 3})] if short else [])]
    run_in_process(NightConfig(repos=groups, runs_dir=runs_dir), ScriptedModel(script), run_id=run_id)


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository and a runs directory after two real runs: NIGHT (six tasks), then LATER (one, verified)."""
    root = tmp_path_factory.mktemp("night")
    known_bug = {"tests/test_known_bug.py": "def test_known_bug():\n    assert 1 + 1 == 3\n", "NOTES.txt": "notes\n"}
    repo = make_repo(root / "repo", {**SAMPLE_FILES, **known_bug})
    _run(repo, root / "runs", NIGHT, NIGHT_TASKS, NIGHT_SCRIPT, SHORT_TASKS)
    add_notes = Reply(tool_calls=[("create_file", {"path": "MORE_NOTES.txt", "content": "more\n"})])
    _run(repo, root / "runs", LATER, ["Look around"], [add_notes, finish("Add notes")])
    night = RunSummary.model_validate_json((root / "runs" / NIGHT / "summary.json").read_text())
    verdicts = ["verified", "verified", "regressed", "failed", "failed", "no_changes"]
    assert [task.verdict for task in night.tasks] == verdicts, "the set-up"
    assert [task.branch for task in night.tasks] == [BRANCH_1, BRANCH_2, BRANCH_3, None, None, None]
    assert night.tasks[0].uncommitted_files.keys() == {"big.txt"}
    return root


class Night:
    """This test's copy of the night: the user's repository and the runs directory that records it."""

    def __init__(self, source: Path, tmp_path: Path) -> None:
        shutil.copytree(source, tmp_path / "night", symlinks=True)
        self.repo = tmp_path / "night" / "repo"
        self.runs = tmp_path / "night" / "runs"
        for run_id in (NIGHT, LATER):  # the copy's summaries name the copy's repository, as do their tasks
            path = self.runs / run_id / "summary.json"
            summary = RunSummary.model_validate_json(path.read_text())
            tasks = [task.model_copy(update={"repo": str(self.repo)}) for task in summary.tasks]
            copied = summary.model_copy(update={"repo": str(self.repo), "repos": [str(self.repo)], "tasks": tasks})
            path.write_text(copied.model_dump_json(indent=2))

    def review(self, *arguments: str, code: int = 0) -> str:
        result = CliRunner().invoke(app, ["review", *arguments, "--runs-dir", str(self.runs)])
        assert result.exit_code == code, (result.stdout, result.stderr, result.exception)
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        return result.stdout if code == 0 else result.stderr

    def git(self, *arguments: str) -> str:
        return subprocess.run(
            ["git", *arguments], cwd=self.repo, check=True, capture_output=True, text=True
        ).stdout.strip()

    def tip(self, branch: str) -> str | None:
        found = self.git("for-each-ref", "--format=%(objectname)", f"refs/heads/{branch}")
        return found or None

    def summary(self, run_id: str = NIGHT) -> RunSummary:
        return RunSummary.model_validate_json((self.runs / run_id / "summary.json").read_text())


@pytest.fixture
def copy(night: Path, tmp_path: Path) -> Night:
    return Night(night, tmp_path)


def test_review_lists_runs_newest_first_with_their_verdict_counts(copy: Night) -> None:
    before = checkout_fingerprint(copy.repo)
    lines = copy.review().splitlines()
    assert len(lines) == 2, "the runs directory's .baselines/ is no run"
    assert lines[0].startswith(f"{LATER}  {copy.repo}  1 task  1 verified  wall ")
    # Task 1 changed pytest.ini: its verdict rests on the configuration it changed, and is counted apart.
    tally = "2 failed, 1 no_changes, 1 regressed, 1 verified, 1 verified*"
    assert lines[1].startswith(f"{NIGHT}  {copy.repo}  6 tasks  {tally}  wall ")
    listed = json.loads(copy.review("--json"))
    assert [run["run_id"] for run in listed] == [LATER, NIGHT]
    assert listed[1]["verdicts"] == {"failed": 2, "no_changes": 1, "regressed": 1, "verified": 1, "verified*": 1}
    assert listed[1]["tasks"] == 6
    assert checkout_fingerprint(copy.repo) == before


REVIEWER_COLUMNS = ("#", "verdict", "task", "tests Δ", "files ±")


def _report_rows(report_md: str) -> list[list[str]]:
    """The task table's body cells as a Markdown renderer shows them (escapes resolved)."""
    rows: list[list[str]] = []
    tokens = MarkdownIt("commonmark").enable("table").parse(report_md)
    for token, following in itertools.pairwise(tokens):
        if token.type == "tr_open" and following.type == "td_open":  # a body row (the head's cells are th)
            rows.append([])
        elif token.type == "td_open":
            rows[-1].append("".join(child.content for child in following.children or []))
    return rows


def test_review_run_shows_the_rows_of_the_morning_report(copy: Night, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    shown = json.loads(copy.review(NIGHT, "--json"))
    rows = [[row[column] for column in REVIEWER_COLUMNS] for row in shown["rows"]]
    reviewer_part = (copy.runs / NIGHT / "report.md").read_text().partition("## Performance")[0]
    assert rows == _report_rows(reviewer_part)
    verdicts = ["verified*", "verified", "regressed", "failed", "failed", "no_changes"]
    assert [row["verdict"] for row in shown["rows"]] == verdicts
    assert shown["rows"][2]["regressed/fixed/flaky"] == "2/0/0", "every key stays in the JSON rows"
    assert shown["rows"][2]["tests Δ"] == "2→0 passed −2"
    table = copy.review(NIGHT)
    assert all(verdict in table for verdict in ("verified", "regressed", "failed"))
    assert BRANCH_1 not in table, "the operator's columns are under --wide"
    assert copy.review("tasks", NIGHT) == table
    wide = copy.review(NIGHT, "--wide")
    assert BRANCH_1 in wide and BRANCH_3 in wide, "branch names whole, to copy"
    assert re.search(rf"{re.escape(BRANCH_1)}\s+\w{{12}}\s+present\s", wide), wide


def test_show_prints_the_message_the_evidence_and_the_diff(copy: Night) -> None:
    before = checkout_fingerprint(copy.repo)
    shown = copy.review("show", f"{NIGHT}/3")
    assert "verdict: REGRESSED (2 tests): tests/test_geometry.py::test_area: assert 5 == 6 and 1 more; " in shown
    assert "repair history: round 1: 2 regressed → round 2: 2 → round 3: 2" in shown
    assert "failure of tests/test_geometry.py::test_area:\n    assert 5 == 6\n" in shown
    assert "tests: 2 passed, 1 failed → 3 failed" in shown
    assert "regressed (2):\n  tests/test_geometry.py::test_area\n  tests/test_geometry.py::test_describe" in shown
    assert "    really done" in shown, "the commit message, from the branch"
    assert "-    return width * height\n+    return width + height" in shown
    assert "\x1b" not in shown and f"+{SHOWN_HOSTILE_LINE}" in shown, "plain text when piped, control codes shown"
    by_branch = copy.review("show", BRANCH_3)
    assert by_branch == shown
    latest = copy.review("show", "1")
    assert f"task 1 of run {LATER}: Look around" in latest and "+more" in latest
    answered = copy.review("show", f"{NIGHT}/6")
    assert f'verdict: no_changes: the model said: "{ANSWER}"' in answered and "no changes" in answered
    data = json.loads(copy.review("show", BRANCH_1, "--json"))
    assert data["commit"] == copy.tip(BRANCH_1) and data["deleted"] == ["NOTES.txt"]
    assert {file["path"] for file in data["files"]} == {
        "NOTES.txt",
        "pkg/geometry.py",
        "pytest.ini",
        "tests/test_docs.py",
    }
    assert checkout_fingerprint(copy.repo) == before


def _on_a_terminal(arguments: list[str], environment: dict[str, str]) -> bytes:
    """The real command with a pseudo-terminal for its stdin, stdout and stderr; what it wrote there."""
    source_root = str(Path(agent.__file__).resolve().parents[1])
    master, slave = os.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "agent", *arguments],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={
            **{name: value for name, value in os.environ.items() if name not in ("LESS", "PAGER")},
            **environment,
            "PYTHONPATH": source_root,
            "TERM": "xterm-256color",
        },
    )
    os.close(slave)
    written = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other side is closed
            break
        if not chunk:
            break
        written += chunk
    os.close(master)
    assert process.wait(timeout=120) == 0, written
    return written


def test_show_on_a_terminal_goes_through_the_pager_highlighted(copy: Night, tmp_path: Path) -> None:
    paged, less_options = tmp_path / "paged", tmp_path / "less-options"
    before = checkout_fingerprint(copy.repo)
    pager = f'echo "$LESS" > {less_options}; cat > {paged}'
    written = _on_a_terminal(["review", "show", f"{NIGHT}/3", "--runs-dir", str(copy.runs)], {"PAGER": pager})
    assert less_options.read_text() == "FRX\n", "as git pages: colours shown (R), short output not paged (F, X)"
    text = paged.read_text()
    assert b"return width" not in written, "the diff went to the pager, not around it"
    assert "\x1b[" in text, "highlighted"
    assert "verdict: REGRESSED (2 tests)" in text and "return width + height" in text
    assert SHOWN_HOSTILE_LINE in text and "\x1b]0;owned" not in text, "the model's escape codes shown as text"
    assert checkout_fingerprint(copy.repo) == before


def test_pr_is_markdown_with_evidence_files_risks_and_provenance(copy: Night, tmp_path: Path) -> None:
    before = checkout_fingerprint(copy.repo)
    text = copy.review("pr", f"{NIGHT}/1")
    sections = [line for line in text.splitlines() if line.startswith("#")]
    lines = text.splitlines()
    assert lines[2:4] == [
        "> [!WARNING]",
        "> **Verified with test infrastructure this change modified.** The suite ran with this branch's "
        "`pytest.ini`. Read the evidence before merging.",
    ], "ours first"
    assert lines[5].startswith("**Verdict: verified\\***: the model called finish; gate: ")
    assert sections == [
        "# Document compute_area",
        "## What changed and why",
        "## Test evidence",
        "## Files touched",
        "## Risk notes",
        "## How this was made",
    ]
    part = {title: body for title, _, body in (s.partition("\n") for s in text.split("\n## "))}
    assert part["What changed and why"].strip() == (
        "In the model's words:\n\n```text\nThe docstring says what the area is; a test checks it.\n```"
    )
    assert "Refactor-Agent-" not in text, "the trailers are said as evidence, not repeated"
    evidence = part["Test evidence"]
    assert "- Tests: 2 passed, 1 failed → 3 passed, 1 failed" in evidence
    assert "- Test infrastructure (1): `pytest.ini`" in evidence
    assert f"- Still failing (1): `{KNOWN_BUG}`" in evidence
    assert "| `pkg/geometry.py` | 1 | 1 |" in part["Files touched"]
    assert "| `NOTES.txt` | 0 | 1 |" in part["Files touched"]
    risks = part["Risk notes"]
    assert "- Changes tests: `tests/test_docs.py`." in risks
    assert "- Changes the test infrastructure its verdict rests on: `pytest.ini`." in risks
    assert "Changes configuration" not in risks, "said once, as what it is"
    assert "- Deletes files: `NOTES.txt`." in risks
    assert "`big.txt` (2000 bytes, above the limit of 1000)" in risks
    made = part["How this was made"]
    assert f"run `{NIGHT}`, task 1" in made and "Model: `scripted`, reasoning effort `max`" in made
    assert f"Branch `{BRANCH_1}`, commit `{copy.tip(BRANCH_1)}`" in made

    body_file = tmp_path / "pr.md"
    said = copy.review("pr", BRANCH_1, "--output", str(body_file))
    assert said.strip() == f"wrote {body_file}; title: Document compute_area"
    assert body_file.read_text() == text.partition("\n\n")[2], "the body for --body-file, without the title"
    assert json.loads(copy.review("pr", BRANCH_1, "--json"))["title"] == "Document compute_area"
    quiet = copy.review("pr", f"{NIGHT}/2")
    assert "- None found" in quiet
    assert checkout_fingerprint(copy.repo) == before


def test_push_sends_one_branch_to_a_remote_the_user_configured(copy: Night, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    copy.git("remote", "add", "origin", str(remote))
    before = checkout_fingerprint(copy.repo)
    said = copy.review("push", f"{NIGHT}/1", "--remote", "origin")
    assert said.strip() == f"pushed {BRANCH_1} ({copy.tip(BRANCH_1)[:12]}) to origin"
    heads = subprocess.run(["git", "ls-remote", "--heads", str(remote)], capture_output=True, text=True, check=True)
    assert heads.stdout.split() == [copy.tip(BRANCH_1), f"refs/heads/{BRANCH_1}"], "that branch and nothing else"
    assert copy.review("push", BRANCH_1, "--remote", "orign", code=2).strip() == (
        "error: no remote 'orign'; nearest: origin"
    )
    refused = copy.review("push", f"{NIGHT}/4", "--remote", "origin", code=2)
    assert refused.strip() == f"error: task {NIGHT}/4 has no commit to push (failed)"
    after = checkout_fingerprint(copy.repo)
    tracking = f"refs/remotes/origin/{BRANCH_1} {copy.tip(BRANCH_1)}"
    assert after.pop("refs") == before.pop("refs") + "\n" + tracking, "git's remote-tracking ref, nothing else"
    assert after == before


def _commit_on_main(copy: Night, path: str, content: str) -> str:
    """The user's own work after the night: a commit on main, in their checkout (before the fingerprint)."""
    (copy.repo / path).parent.mkdir(parents=True, exist_ok=True)
    (copy.repo / path).write_text(content)
    copy.git("add", path)
    copy.git("commit", "-q", "-m", f"change {path}")
    return copy.git("rev-parse", "HEAD")


def test_rebase_applies_only_the_branch_that_stays_clean_and_names_branches_that_conflict(copy: Night) -> None:
    # main now insists the docstring starts with "Area": task 1's wording keeps that, task 2's does not.
    test_doc = "from pkg.geometry import compute_area\n\n\ndef test_doc_starts_with_area():\n"
    test_doc += "    assert compute_area.__doc__.startswith('Area')\n"
    main = _commit_on_main(copy, "tests/test_doc_style.py", test_doc)
    before = checkout_fingerprint(copy.repo)
    tips = {branch: copy.tip(branch) for branch in (BRANCH_1, BRANCH_2, BRANCH_3)}
    report = json.loads(copy.review("rebase", NIGHT, "--onto", "main", "--apply", "--json"))
    trials = {trial["branch"]: trial for trial in report["branches"]}
    assert list(trials) == [BRANCH_1, BRANCH_2], "only the verified branches"
    assert (trials[BRANCH_1]["outcome"], trials[BRANCH_1]["verdict"]) == ("clean", "verified")
    assert trials[BRANCH_1]["tests"] == "4 passed, 1 failed (baseline 3 passed, 1 failed)"
    assert trials[BRANCH_2]["outcome"] == "regressed"
    assert trials[BRANCH_2]["regressed"] == ["tests/test_doc_style.py::test_doc_starts_with_area"]
    assert report["conflicting_pairs"] == [{"first": BRANCH_1, "second": BRANCH_2, "files": ["pkg/geometry.py"]}]
    # --apply moved the clean branch onto main, and only it.
    assert trials[BRANCH_1]["moved"] and not trials[BRANCH_2]["moved"]
    assert copy.tip(BRANCH_1) == trials[BRANCH_1]["rebased_commit"] != tips[BRANCH_1]
    assert copy.git("rev-parse", f"{BRANCH_1}^") == main
    # The moved commit carries the evidence of the new base, not the old one's.
    trailers = [line for line in copy.git("log", "-1", "--format=%B", BRANCH_1).splitlines() if ": " in line]
    evidence = [line for line in trailers if line.startswith(("Refactor-Agent-Verdict", "Refactor-Agent-Tests"))]
    assert sorted(evidence) == [
        "Refactor-Agent-Tests: 4 passed, 1 failed (baseline 3 passed, 1 failed)",
        "Refactor-Agent-Verdict: verified*",  # the task changed pytest.ini: marked, on the new base too
    ]
    assert f"Refactor-Agent-Rebased-Onto: {main}" in trailers
    assert copy.git("log", "-1", "--format=%an %ae", BRANCH_1) == copy.git(
        "log", "-1", "--format=%an %ae", tips[BRANCH_1]
    )
    assert copy.git("diff", "--name-only", main, BRANCH_1).split() == [
        "NOTES.txt",
        "pkg/geometry.py",
        "pytest.ini",
        "tests/test_docs.py",
    ]
    assert {branch: copy.tip(branch) for branch in (BRANCH_2, BRANCH_3)} == {
        branch: tips[branch] for branch in (BRANCH_2, BRANCH_3)
    }
    assert checkout_fingerprint(copy.repo) == before, "main, the index, the work tree and the worktrees untouched"


def test_rebase_apply_moves_no_branch_that_is_not_verified_on_the_new_base(copy: Night) -> None:
    # On main the suite cannot run any more: nothing on the new base proves the branches.
    _commit_on_main(copy, "tests/conftest.py", "import not_installed_anywhere\n")
    before = checkout_fingerprint(copy.repo)
    tips = {branch: copy.tip(branch) for branch in (BRANCH_1, BRANCH_2)}
    report = json.loads(copy.review("rebase", NIGHT, "--onto", "main", "--apply", "--json"))
    for trial in report["branches"]:
        assert (trial["outcome"], trial["verdict"], trial["moved"]) == ("clean", "unverified", False)
        assert trial["not_moved"].startswith("not verified on the new base (unverified: ")
        assert "the suite did not run at baseline: pytest exit code 4" in trial["not_moved"]
    assert {branch: copy.tip(branch) for branch in (BRANCH_1, BRANCH_2)} == tips
    trailers = copy.git("log", "-1", "--format=%B", BRANCH_1)
    assert "Refactor-Agent-Verdict: verified" in trailers and "Rebased-Onto" not in trailers
    assert checkout_fingerprint(copy.repo) == before


def test_rebase_reports_conflicts_with_the_new_base_and_moves_nothing(copy: Night) -> None:
    geometry = (copy.repo / "pkg" / "geometry.py").read_text().replace(DOCSTRING, '"""Width times height."""')
    _commit_on_main(copy, "pkg/geometry.py", geometry)
    before = checkout_fingerprint(copy.repo)
    tips = {branch: copy.tip(branch) for branch in (BRANCH_1, BRANCH_2)}
    said = copy.review("rebase", NIGHT, "--onto", "main")
    assert said.splitlines() == [
        f"{BRANCH_1}: conflicts: pkg/geometry.py",
        f"{BRANCH_2}: conflicts: pkg/geometry.py",
        "nothing moved (pass --apply to move the branches verified on the new base)",
    ]
    assert {branch: copy.tip(branch) for branch in (BRANCH_1, BRANCH_2)} == tips
    assert checkout_fingerprint(copy.repo) == before


def test_discard_deletes_the_chosen_branches_and_asks_first(copy: Night) -> None:
    before = checkout_fingerprint(copy.repo)
    refused = copy.review("discard", NIGHT, "--only", "regressed", code=2)
    assert refused.strip() == f"error: would delete 1 branch of run {NIGHT}: pass --yes (no terminal to ask on)"
    assert copy.tip(BRANCH_3) is not None
    said = copy.review("discard", NIGHT, "--only", "regressed", "--yes")
    assert said.splitlines() == [f"deleted 1 branch of run {NIGHT}", f"  {BRANCH_3}"]
    assert copy.tip(BRANCH_3) is None and copy.tip(BRANCH_1) is not None
    rest = json.loads(copy.review("discard", NIGHT, "--yes", "--json"))
    assert rest == {"deleted": [BRANCH_1, BRANCH_2], "kept": {}, "recorded_discarded": []}  # a one-off run's
    assert copy.git("for-each-ref", "refs/heads/refactor-agent/" + NIGHT) == ""
    assert copy.tip(LATER_BRANCH) is not None, "another run's branch stays"
    assert checkout_fingerprint(copy.repo) == before


def test_discard_keeps_a_branch_that_is_checked_out(copy: Night) -> None:
    copy.git("checkout", "-q", BRANCH_3)
    before = checkout_fingerprint(copy.repo)
    said = copy.review("discard", NIGHT, "--only", "regressed", "--yes", code=1)
    assert said == f"kept {BRANCH_3}: {BRANCH_3} is checked out; switch away from it first\n"
    assert copy.tip(BRANCH_3) is not None
    assert checkout_fingerprint(copy.repo) == before


@pytest.mark.parametrize(
    ("arguments", "line"),
    [
        (["20261201-013000-a1b3"], f"no run '20261201-013000-a1b3'; nearest: {NIGHT}"),
        (["show", f"{NIGHT}/9"], f"no task {NIGHT}/9: the run's tasks are 1, 2, 3, 4, 5, 6"),
        (["show", BRANCH_1 + "x"], f"no branch or task '{BRANCH_1}x'; nearest: {BRANCH_1}"),
        (["pr", "nothing-like-it"], "no branch or task 'nothing-like-it'; there are: "),
        (["rebase", NIGHT, "--onto", "mian"], "no ref 'mian'; nearest: main"),
        (["discard", "20261201-02000-c3d4", "--yes"], f"no run '20261201-02000-c3d4'; nearest: {LATER}"),
    ],
)
def test_unknown_names_get_one_line_with_the_nearest_and_exit_2(copy: Night, arguments: list[str], line: str) -> None:
    before = checkout_fingerprint(copy.repo)
    said = copy.review(*arguments, code=2)
    assert said.count("\n") == 1 and said.startswith(f"error: {line}"), said
    assert checkout_fingerprint(copy.repo) == before


def _review_at(copy: Night, columns: int, *arguments: str) -> str:
    result = CliRunner(env={"COLUMNS": str(columns)}).invoke(app, ["review", *arguments, "--runs-dir", str(copy.runs)])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result.stdout


@pytest.mark.parametrize("columns", [100, 80])
def test_review_run_fits_100_columns_one_line_per_task(copy: Night, columns: int) -> None:
    shown = _review_at(copy, columns, NIGHT)
    lines = shown.splitlines()
    assert all(len(line) <= columns for line in lines), [line for line in lines if len(line) > columns]
    assert any(re.match(r"^\s*#\s+verdict\s+task\s+tests Δ\s+files ±\s*$", line) for line in lines), lines[:4]
    verdicts = ["verified*", "verified", "regressed", "failed", "failed", "no_changes"]
    for index, verdict in enumerate(verdicts, start=1):
        assert any(re.match(rf"^\s*{index}\s+{re.escape(verdict)}\s+\S", line) for line in lines), (index, shown)
    assert re.search(r"^\s*3\s+regressed\s+Break the area\s+2→0 passed −2\s+1 \+2/-1\s*$", shown, re.M), shown


def test_review_run_says_why_each_task_is_not_verified(copy: Night) -> None:
    shown = _review_at(copy, 1000, NIGHT)
    why = [line for line in shown.splitlines() if re.match(r"^[3-6] ", line)]
    assert why == [
        "3 REGRESSED (2 tests): tests/test_geometry.py::test_area: assert 5 == 6 and 1 more; "
        "round 1: 2 regressed → round 2: 2 → round 3: 2",
        f"4 failed: lost the model server: {LOST}",
        f"5 failed: reached --max-turns 3 without finish; 3 rejected tool calls (str_replace 3); last: {MISSING_TEXT}; "
        "it must occur exactly once (add surrounding lines)",
        f'6 no_changes: the model said: "{ANSWER}"',
    ]
    report = (copy.runs / NIGHT / "report.md").read_text()
    assert all(line.replace("_", "\\_") in report or line in report for line in why[1:2])


def test_what_fails_on_the_base_is_said_once_per_run(copy: Night) -> None:
    shown = _review_at(copy, 1000, NIGHT)
    base = copy.summary().tasks[0].base_commit
    assert shown.count(KNOWN_BUG) == 1
    assert f"already failing on the base {base[:10]} (before any task): 1 test: {KNOWN_BUG}" in shown
    report = (copy.runs / NIGHT / "report.md").read_text()
    assert report.count(KNOWN_BUG) == 1, "once, under the run's table"
    assert "the 1 test already failing on the base" in report


def test_the_pr_of_a_regressed_branch_opens_with_a_warning_and_lists_the_regressions_as_risks(copy: Night) -> None:
    text = copy.review("pr", f"{NIGHT}/3")
    body = text.partition("\n\n")[2]
    tokens = MarkdownIt("commonmark").parse(body)
    assert tokens[0].type == "blockquote_open", "the warning comes first"
    quote = "".join(token.content for token in tokens[: [t.type for t in tokens].index("blockquote_close")])
    assert quote.startswith("[!WARNING]\n**Not verified: regressed.** 2 tests that passed on the base fail")
    risks = text.partition("## Risk notes")[2].partition("## ")[0]
    for test in ("tests/test_geometry.py::test_area", "tests/test_geometry.py::test_describe"):
        assert f"- Regressed: `{test}` passed on the base and fails here (2 repair rounds did not fix it)." in risks
    assert "None found" not in risks
    assert "- 4 model turns" in text or "model turns" in text


def test_a_task_without_a_commit_has_no_pr(copy: Night) -> None:
    for index, verdict in ((4, "failed"), (6, "no_changes")):
        result = CliRunner().invoke(app, ["review", "pr", f"{NIGHT}/{index}", "--runs-dir", str(copy.runs)])
        assert result.exit_code == 2 and result.stdout == ""
        assert result.stderr == (
            f"error: task {index} of run {NIGHT} has no commit ({verdict}); see review show {NIGHT}/{index}\n"
        )
    assert "the model said" in copy.review("show", f"{NIGHT}/6"), "the evidence is still shown"


def test_discard_only_empty_deletes_the_branches_of_tasks_without_a_commit(copy: Night) -> None:
    """A run from before empty branches were deleted: task 5's branch sits at the base commit."""
    summary = copy.summary()
    old_branch = f"refactor-agent/{NIGHT}/5-type-the-report"
    copy.git("branch", old_branch, summary.tasks[4].base_commit)
    moved_branch = f"refactor-agent/{NIGHT}/6-document-the-geometry-module"
    copy.git("branch", moved_branch, BRANCH_1)  # someone's work on it since: kept
    tasks = list(summary.tasks)
    tasks[4] = tasks[4].model_copy(update={"branch": old_branch})
    tasks[5] = tasks[5].model_copy(update={"branch": moved_branch})
    (copy.runs / NIGHT / "summary.json").write_text(summary.model_copy(update={"tasks": tasks}).model_dump_json())
    said = copy.review("discard", NIGHT, "--only", "empty", "--yes")
    assert said.splitlines() == [f"deleted 1 branch of run {NIGHT}", f"  {old_branch}"]
    assert copy.tip(old_branch) is None and copy.tip(moved_branch) is not None
    assert all(copy.tip(branch) is not None for branch in (BRANCH_1, BRANCH_2, BRANCH_3))
