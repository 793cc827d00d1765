"""The packer on real git repositories: selection, determinism, ranking, outlines, budgets and the CLI; exact counts
from the model's own tokenizer on a real llama-server (SmolLM2-135M, marker `llama_server`)."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import itertools
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.packing import PackError, PackOptions, pack_repository
from agent.packing.budget import context_budget
from agent.packing.graph import build_graph
from agent.packing.options import default_cache_dir
from agent.packing.outline import MAX_OUTLINE_BYTES, MAX_PARSED_BYTES, extract_outline
from agent.packing.rank import rank_files
from agent.packing.render import MAX_SHOWN_LINE_CHARS
from agent.packing.repomap import OUTLINES_TABLE
from agent.packing.symbols import extract_symbols
from agent.server.api import LlamaServerAPI
from agent.server.launcher import ServerState

from support.early import BACKGROUND, started_early
from support.pack_repos import commit_all, make_module_repo, make_planted_repo, tiered_repo
from support.repos import copy_of_template, make_repo
from support.scripted_server import ScriptedServer, tokens_of
from support.user_cache import USER_CACHE


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    return make_planted_repo(tmp_path / "planted")


def _head(repo: Path) -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, check=True, text=True
    ).stdout.strip()


def views(packed) -> dict[str, tuple[str, str | None]]:
    return {stat.path: (stat.view, stat.reason) for stat in packed.stats.files}


def test_selection_follows_git_and_content(planted: Path, cache_dir: Path) -> None:
    packed = pack_repository(planted, PackOptions(cache_dir=cache_dir))
    seen = views(packed)
    text = packed.text

    # Ignored paths (root anchored, nested .gitignore, info/exclude) and untracked files are never listed.
    for ignored in ("build/out.py", "sub/debug.log", "notes.txt", "untracked.py"):
        assert ignored not in seen
    # An anchored ignore pattern does not reach deeper folders of the same name.
    assert seen["pkg/build/helper.py"] == ("full", None)
    assert '<file path="pkg/build/helper.py">' in text
    # Secrets inside ordinary source are no reason to drop it.
    assert seen["pkg/settings.py"][0] == "full"
    assert seen[".env.example"][0] == "full"
    assert "café crème" in text  # Latin-1 content, re-encoded
    assert seen["caf\\xe9_name.txt"][0] == "full"
    assert '<file path="caf\\xe9_name.txt">' in text

    expected_exclusions = {
        "data.bin": "binary content",
        ".env": "likely holds credentials (file name)",
        "deploy.pem": "likely holds credentials (file name)",
        "model.bin": "Git LFS pointer",
        "package-lock.json": "lock file",
        "gen/schema_pb2.py": "generated (marker in its header)",
        "vendor_sub": "submodule (listed, not entered)",
        "outside_link": "symlink to /etc/hostname (not followed)",
        "inside_link.py": "symlink to pkg/geometry.py (not followed)",
    }
    for path, reason in expected_exclusions.items():
        assert seen[path] == ("excluded", reason), path
        assert f'path="{path}"' not in text
    assert seen["static/app.min.js"][0] == "excluded"
    assert seen["static/app.min.js"][1].startswith("minified")
    assert "data.bin" not in text  # no placeholder for binaries
    assert "sk-live-123" not in text and "PRIVATE KEY" not in text
    assert packed.stats.counts == "estimated"
    assert packed.stats.files_listed == len(seen)
    assert packed.stats.files_full + packed.stats.files_excluded == packed.stats.files_listed


def test_a_folder_made_a_link_out_of_the_tree_and_a_file_made_a_fifo_are_neither_followed_nor_waited_on(
    tmp_path: Path, cache_dir: Path
) -> None:
    """A task's suite runs while the host packs its worktree: it may swap a listed folder for a link to a folder
    outside, or a listed file for a FIFO (an open for reading would wait for a writer forever)."""
    repo = make_repo(tmp_path / "repo")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "geometry.py").write_text("SECRET = 'outside the repository'\n")
    (repo / "pkg").rename(tmp_path / "pkg-moved")
    (repo / "pkg").symlink_to(outside)
    (repo / "tests/test_geometry.py").unlink()
    os.mkfifo(repo / "tests/test_geometry.py")
    packed = pack_repository(repo, PackOptions(cache_dir=cache_dir))
    seen = views(packed)
    assert seen["pkg/geometry.py"] == ("excluded", "a folder on its path is a symlink (not followed)")
    assert seen["tests/test_geometry.py"] == ("excluded", "unreadable: not a regular file")
    assert "SECRET" not in packed.text


def test_flags_bring_back_generated_secret_and_untracked_files(planted: Path, cache_dir: Path) -> None:
    options = PackOptions(cache_dir=cache_dir, include_generated=True, include_secrets=True, include_untracked=True)
    seen = views(pack_repository(planted, options))
    for path in ("model.bin", "package-lock.json", "gen/schema_pb2.py", "static/app.min.js", ".env", "deploy.pem"):
        assert seen[path][0] == "full", path
    assert seen["untracked.py"][0] == "full"
    assert seen["data.bin"][0] == "excluded"  # binaries stay out whatever the flags


def test_empty_repository_and_bad_input(tmp_path: Path, cache_dir: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=empty, check=True)
    packed = pack_repository(empty, PackOptions(cache_dir=cache_dir))
    assert packed.text == "<repository>\n</repository>\n"
    assert packed.stats.files_listed == 0
    with pytest.raises(PackError, match="not inside a git work tree"):
        pack_repository(tmp_path, PackOptions(cache_dir=cache_dir))
    for name in ("sub", "\n"):  # a folder's name that is a newline is a prefix all the same
        (empty / name).mkdir()
        with pytest.raises(PackError, match="is a subdirectory of a git repository"):
            pack_repository(empty / name, PackOptions(cache_dir=cache_dir))
    with pytest.raises(PackError, match="not a directory"):
        pack_repository(tmp_path / "missing", PackOptions(cache_dir=cache_dir))


def test_outline_of_python() -> None:
    source = (
        '"""Module docstring."""\n'
        "LIMIT = 10\n"
        "\n"
        "class Shape(Base):\n"
        '    """A shape.\n'
        "\n"
        '    Long description."""\n'
        "\n"
        "    def area(self,\n"
        "             scale: float = 1.0) -> float:\n"
        '        """Area of the shape."""\n'
        "        def helper():\n"
        "            return 2\n"
        "        return helper() * scale\n"
        "\n"
        "def main() -> None: print(Shape())\n"
    )
    assert extract_outline("python", source) == (
        "2: LIMIT = 10\n"
        "4: class Shape(Base):\n"
        '5:     """A shape.\n'
        "9:     def area(self,\n"
        "10:              scale: float = 1.0) -> float:\n"
        '11:         """Area of the shape."""\n'
        "16: def main() -> None:\n"
    )
    symbols = extract_symbols("python", source.encode())
    assert symbols.definitions == ("LIMIT", "Shape", "area", "helper", "main")
    assert dict(symbols.reference_counts())["Shape"] == 2


def test_outline_of_typescript() -> None:
    source = (
        "/** Greets people. */\n"
        "export class Greeter<T> extends Base {\n"
        "  // Says hello.\n"
        "  greet(name: string): string {\n"
        "    const inner = () => 1;\n"
        '    return "hi " + name;\n'
        "  }\n"
        "}\n"
        "export interface Shape {\n"
        "  area(): number;\n"
        "}\n"
        "type Id = string | number;\n"
        "export const add = (a: number, b: number): number => a + b;\n"
        "enum Color { Red, Green }\n"
    )
    outline = extract_outline("typescript", source)
    assert outline == (
        "1: /** Greets people. */\n"
        "2: export class Greeter<T> extends Base\n"
        "3:   // Says hello.\n"
        "4:   greet(name: string): string\n"
        "9: export interface Shape\n"
        "10:   area(): number;\n"
        "12: type Id = string | number;\n"
        "13: export const add = (a: number, b: number): number =>\n"
        "14: enum Color\n"
    )
    assert "inner" not in outline
    assert extract_outline("tsx", "export function App(): JSX.Element { return <div/>; }\n") == (
        "1: export function App(): JSX.Element\n"
    )


def test_outline_of_a_huge_file_covers_its_first_part_and_says_so() -> None:
    methods = "".join(f"    def method_{number:05d}(self):\n        return {number}\n\n" for number in range(3000))
    source = "class Huge:\n" + methods + "def tail_function():\n    return 0\n"
    assert len(source.encode()) > 2 * MAX_PARSED_BYTES
    outline = extract_outline("python", source)
    assert len(outline.encode()) <= MAX_OUTLINE_BYTES
    assert outline.startswith("1: class Huge:\n2:     def method_00000(self):\n")
    # Past the parsed part, even a top-level definition is not seen: the outline says where it stops.
    assert "tail_function" not in outline
    parsed_lines = source.encode()[:MAX_PARSED_BYTES].count(b"\n")  # it stops at the last whole line
    assert outline.endswith(f"... outline of lines 1-{parsed_lines} of {source.count(chr(10))} only\n")


def test_outline_is_capped_keeping_top_level_definitions() -> None:
    methods = "".join(
        f'    def test_case_{number:03d}(self):\n        """Checks case {number}."""\n        pass\n'
        for number in range(300)
    )
    source = "class BigTests(TestCase):\n" + methods + "\n\ndef helper():\n    return 1\n"
    outline = extract_outline("python", source)
    assert len(outline.encode()) <= MAX_OUTLINE_BYTES
    assert outline.startswith("1: class BigTests(TestCase):\n2:     def test_case_000(self):\n")
    # Every top-level line stays; the methods that fit follow in file order, without their docstrings.
    assert "def helper():" in outline and "Checks case" not in outline
    shown = [number for number in range(300) if f"def test_case_{number:03d}(self):" in outline]
    assert shown == list(range(len(shown))) and 50 < len(shown) < 300
    assert outline.endswith(f"... {600 - len(shown)} more outline lines not shown\n")
    # Fewer methods fit whole: only their docstrings' lines give way.
    shorter = extract_outline("python", "class Few:\n" + methods[: len(methods) // 5])
    assert "def test_case_059(self):" in shorter and "Checks case" not in shorter


def test_symbols_of_typescript() -> None:
    source = (
        "export class Greeter<T> extends Base {\n"
        "  private async load(id: number): Promise<T> {\n"
        "    if (id) {\n"
        "      return fetch(id);\n"
        "    }\n"
        "  }\n"
        "}\n"
        "export interface Shape {\n"
        "  area(): number;\n"
        "}\n"
        "type Id = string | number;\n"
        "export const add = (a: number, b: number): number => a + b;\n"
        "function* walk() {}\n"
    )
    assert extract_symbols("typescript", source.encode()).definitions == (
        "Greeter",
        "Id",
        "Shape",
        "add",
        "area",
        "load",
        "walk",
    )


def test_only_files_shown_as_outlines_are_parsed(tmp_path: Path, cache_dir: Path) -> None:
    repo = make_module_repo(tmp_path / "proj", modules=150)
    packed = pack_repository(repo, PackOptions(cache_dir=cache_dir, budget_tokens=3000))
    with sqlite3.connect(cache_dir / "pack-cache.sqlite3") as connection:
        parsed = connection.execute(f"SELECT COUNT(*) FROM {OUTLINES_TABLE}").fetchone()[0]
    assert 0 < packed.stats.files_outline <= parsed < 150


def test_ranking_puts_task_named_files_first(tmp_path: Path, cache_dir: Path) -> None:
    repo = make_module_repo(tmp_path / "proj", modules=12)
    paths = sorted(f"proj/mod{number:02d}.py" for number in range(12))
    graph = build_graph([extract_symbols("python", (repo / path).read_bytes()) for path in paths])
    assert paths[rank_files(paths, graph, "Rename things in proj/mod07.py please")[0]] == "proj/mod07.py"
    assert paths[rank_files(paths, graph, "mod03.py has a bug")[0]] == "proj/mod03.py"
    # Identifiers named in the task pull their defining file up.
    by_identifier = [paths[index] for index in rank_files(paths, graph, "function_09 should return a float")]
    untouched = [paths[index] for index in rank_files(paths, graph, None)]
    assert by_identifier.index("proj/mod09.py") < untouched.index("proj/mod09.py")
    # Without a task, what everything depends on ranks first: mod00 is at the bottom of the call chain.
    assert untouched[0] == "proj/mod00.py"

    # Through the packer: a budget for a few whole files gives one to the file the task names.
    fifth = views(pack_repository(repo, PackOptions(cache_dir=cache_dir, budget_tokens=1500, task="Fix proj/mod05.py")))
    eighth = views(
        pack_repository(repo, PackOptions(cache_dir=cache_dir, budget_tokens=1500, task="Fix proj/mod08.py"))
    )
    assert fifth["proj/mod05.py"][0] == eighth["proj/mod08.py"][0] == "full"
    assert fifth["proj/mod08.py"][0] != "full" and eighth["proj/mod05.py"][0] != "full"
    assert {view for view, _ in fifth.values()} == {"full", "outline", "path"}


# Packs the repository into each cache folder named on a line of its input, and prints the digest of each text; an
# empty line ends it, as does the end of its input (which a process forked from the session meanwhile would delay:
# it holds the pipe too).
PACKER_SCRIPT = (
    "import sys, hashlib; from pathlib import Path; from agent.packing import PackOptions, pack_repository\n"
    "repo, budget, task = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]\n"
    "while line := sys.stdin.readline().rstrip('\\n'):\n"
    "    options = PackOptions(cache_dir=Path(line), budget_tokens=budget, task=task)\n"
    "    print(hashlib.sha256(pack_repository(repo, options).text.encode()).hexdigest(), flush=True)\n"
)


def _packer_process(repo: Path, seed: str, budget: int, task: str) -> subprocess.Popen[str]:
    command = [*BACKGROUND, sys.executable, "-c", PACKER_SCRIPT, str(repo), str(budget), task]
    env = {**os.environ, "PYTHONHASHSEED": seed}
    return subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _ask_to_pack(process: subprocess.Popen[str], cache_dir: Path | str) -> None:
    assert process.stdin is not None
    process.stdin.write(f"{cache_dir}\n")
    process.stdin.flush()


def _ask_to_stop(process: subprocess.Popen[str]) -> None:
    _ask_to_pack(process, "")


@dataclass(frozen=True)
class ColdPackers:
    """Two packer processes of hash seeds of their own (neither this process's), each asked to pack `repo` into a
    cache folder of its own, cache-SEED under `folder`."""

    repo: Path
    folder: Path
    task: str
    seeds: list[str]
    processes: list[subprocess.Popen[str]]


@started_early
def cold_packers() -> Callable[[], ColdPackers]:
    """Their two cold packs, at once, started as collection ends."""
    folder = Path(tempfile.mkdtemp(prefix="cold-packers-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    repo = make_module_repo(folder / "proj", modules=40)
    task = "Make function_17 and Widget23 faster"
    seeds = [seed for seed in ("1", "2", "3") if seed != os.environ.get("PYTHONHASHSEED")][:2]
    processes = [_packer_process(repo, seed, 6000, task) for seed in seeds]
    for process, seed in zip(processes, seeds, strict=True):
        _ask_to_pack(process, folder / f"cache-{seed}")
    packers = ColdPackers(repo, folder, task, seeds, processes)
    return lambda: packers


def test_deterministic_across_processes(cold_packers: ColdPackers) -> None:
    processes, seeds, folder = cold_packers.processes, cold_packers.seeds, cold_packers.folder
    try:
        digests = {process.stdout.readline().strip() for process in processes if process.stdout is not None}
        # The first process then reads the symbols, outlines and counts the second one cached: same bytes again.
        _ask_to_pack(processes[0], folder / f"cache-{seeds[1]}")
        assert processes[0].stdout is not None
        digests.add(processes[0].stdout.readline().strip())
    finally:
        for process in processes:
            with contextlib.suppress(BrokenPipeError):  # ended already: its failure is told below
                _ask_to_stop(process)
            process.communicate()
    assert [process.returncode for process in processes] == [0, 0]
    assert len(digests) == 1 and "" not in digests
    options = PackOptions(cache_dir=folder / f"cache-{seeds[0]}", budget_tokens=6000, task=cold_packers.task)
    inline = pack_repository(cold_packers.repo, options)
    assert hashlib.sha256(inline.text.encode()).hexdigest() in digests
    assert inline.stats.files_outline > 0 and inline.stats.files_full > 0


def test_budget_is_never_exceeded_with_exact_counts(tmp_path: Path, cache_dir: Path) -> None:
    repo = make_module_repo(tmp_path / "proj", modules=40)
    with ScriptedServer() as server:
        for budget in (150, 400, 1500, 3000, 6000, 12000):
            for format_name in ("xml", "markdown"):
                options = PackOptions(
                    cache_dir=cache_dir, server_url=server.url, budget_tokens=budget, format=format_name
                )
                packed = pack_repository(repo, options)
                assert packed.stats.counts == "exact"
                assert packed.stats.total_tokens <= budget
                # The server's own count of the whole text: pieces were counted apart, the sum must hold.
                assert tokens_of(packed.text) <= packed.stats.total_tokens
        everything = pack_repository(repo, PackOptions(cache_dir=cache_dir, server_url=server.url))
    # No budget given: the server's window (65,536 here) minus reserves holds this whole repository.
    assert everything.stats.budget_tokens is not None and everything.stats.budget_tokens < server.n_ctx
    assert everything.stats.files_full == everything.stats.files_listed


def _whole_file(text: str) -> bool:
    """A file's whole rendering sent to /tokenize (not an outline, not the packed text)."""
    first = text.split("\n", 1)[0]
    return first.startswith("<file path=") and 'view="outline"' not in first


def test_exact_counts_only_for_what_is_selected_never_over_budget_cold_equals_warm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Selection on estimates from a sample, exact counts for what it shows: a fraction of the repository goes
    through /tokenize, the pack never exceeds the budget, and a warm run (or another cache) gives the same text."""
    from agent.packing import full_costs

    monkeypatch.setattr(full_costs, "SAMPLE_MIN_BYTES", 8 * 1024)
    repo = make_module_repo(tmp_path / "proj", modules=60)
    # Files whose tokens per byte the .py sample gets wrong (3-byte characters): the exact counts must correct it.
    for number in range(8):
        (repo / "proj" / f"wide{number}.py").write_text(f"名前{number} = '日本語のテキスト'\n" * 60)
    commit_all(repo, "wide files")
    files = len(list((repo / "proj").iterdir())) + 1  # and the README
    with ScriptedServer() as server:
        for budget in (1500, 4000, 9000):
            packs = []
            for cache in ("a", "a", "b"):
                server.tokenized.clear()
                options = PackOptions(
                    cache_dir=tmp_path / cache / str(budget), server_url=server.url, budget_tokens=budget
                )
                packs.append(pack_repository(repo, options))
                if cache == "b":  # cold: whole files counted are the sample and the selection, not every file
                    whole_files = [text for text in server.tokenized if _whole_file(text)]
                    assert 0 < len(whole_files) < files / 2, len(whole_files)
            cold, warm, elsewhere = packs
            assert cold.text == warm.text == elsewhere.text
            assert cold.stats.files_full > 0 and cold.stats.files_path_only > 0
            assert cold.stats.total_tokens <= budget and tokens_of(cold.text) <= budget
            # What is shown whole was counted exactly.
            for stat in cold.stats.files:
                if stat.view == "full":
                    rendered = f'<file path="{stat.path}">\n{(repo / stat.path).read_text()}</file>\n'
                    assert stat.tokens_full == tokens_of(rendered), stat.path


def test_selection_shrinks_until_the_whole_text_fits(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A tokenizer under which every file boundary costs 5 more tokens in the whole text than in the pieces.
    from agent.packing import packer
    from agent.packing.tokens import EstimatingCounter

    class SeamyCounter(EstimatingCounter):
        exact = True
        tokenizer = "seamy"

        def count_text(self, text: str) -> int:
            return super().count_text(text) + 5 * text.count("<file ")

    monkeypatch.setattr(packer, "make_counter", lambda *args, **kwargs: SeamyCounter(0.3))
    repo = make_module_repo(tmp_path / "proj", modules=40)
    for budget in (600, 2000, 5000, 9000):
        packed = pack_repository(repo, PackOptions(cache_dir=cache_dir, budget_tokens=budget, task="Widget12"))
        assert packed.stats.files_full + packed.stats.files_outline > 0
        assert packed.stats.total_tokens == SeamyCounter(0.3).count_text(packed.text) <= budget


def test_tasks_on_one_commit_share_the_rendered_prefix(tmp_path: Path, cache_dir: Path) -> None:
    repo = make_module_repo(tmp_path / "proj", modules=10)
    with ScriptedServer() as server:
        first = pack_repository(repo, PackOptions(cache_dir=cache_dir, server_url=server.url, task="Rename Widget03"))
        second = pack_repository(repo, PackOptions(cache_dir=cache_dir, server_url=server.url, task="Speed up mod07"))
    assert first.stats.files_full == first.stats.files_listed
    assert first.text == second.text
    assert "Rename" not in first.text and "Speed up" not in second.text


def test_counts_are_cached_per_blob(tmp_path: Path, cache_dir: Path) -> None:
    repo = make_module_repo(tmp_path / "proj", modules=6)
    database = cache_dir / "pack-cache.sqlite3"

    def cached_counts() -> int:
        with sqlite3.connect(database) as connection:
            tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE name LIKE 'tokens%'")]
            # Files' counts; whole texts (wrappers, path lists, the packed text) are cached under "text:" keys.
            query = "SELECT COUNT(*) FROM {} WHERE key NOT LIKE 'text:%'"
            return sum(connection.execute(query.format(table)).fetchone()[0] for table in tables)

    with ScriptedServer() as server:
        options = PackOptions(cache_dir=cache_dir, server_url=server.url)
        pack_repository(repo, options)
        after_first = cached_counts()
        pack_repository(repo, options)
        assert cached_counts() == after_first  # nothing new counted
        (repo / "proj" / "mod02.py").write_text("changed = True\n")
        commit_all(repo, "change one file")
        pack_repository(repo, options)
        assert cached_counts() == after_first + 1  # only the changed file
    assert after_first == 7  # README + 6 modules


def test_a_cold_pack_writes_its_cache_file_in_one_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The facts, symbols, outlines, rankings, ages and counts a cold pack learns go to its cache file in one commit
    (each commit costs two fsyncs); a warm pack, which learns nothing, commits nothing."""
    commits: list[str] = []
    connect = sqlite3.connect

    def traced(database: Path, *args: object, **kwargs: object) -> sqlite3.Connection:
        connection = connect(database, *args, **kwargs)  # type: ignore[arg-type]
        connection.set_trace_callback(
            lambda statement: commits.append(Path(database).name) if statement == "COMMIT" else None
        )
        return connection

    monkeypatch.setattr(sqlite3, "connect", traced)
    repo = make_module_repo(tmp_path / "proj", modules=40)
    cache_dir = tmp_path / "cache"
    with ScriptedServer() as server:
        options = PackOptions(cache_dir=cache_dir, server_url=server.url, budget_tokens=1500, task="Widget07")
        cold = pack_repository(repo, options)
        assert cold.stats.files_outline > 0 and cold.stats.files_path_only > 0  # ranked, outlined, counted
        assert commits == ["pack-cache.sqlite3"]
        commits.clear()
        warm = pack_repository(repo, options)
    assert commits == [] and warm.text == cold.text
    with closing(connect(cache_dir / "pack-cache.sqlite3")) as connection:
        tables = {row[0].split("_")[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert {"facts", "symbols", "outlines", "rankings", "churn", "tokens"} <= tables


def test_exact_ratio_depends_on_what_was_counted_not_on_the_cache(tmp_path: Path, cache_dir: Path) -> None:
    # Path lines are estimated with the running ratio: a warm run must see the ratios the cold run saw.
    from agent.packing.server_tokens import ServerCounter
    from agent.packing.tokens import CountRequest

    def requests(text: str, copies: int) -> list[CountRequest]:
        return [CountRequest(f"{text[:8]}:{n}", lambda: text, len(text.encode())) for n in range(copies)]

    # The scripted tokenizer counts characters: multi-byte text has fewer tokens per byte.
    prose, code = requests("plain words in a sentence " * 40, 30), requests("naïve 日本語 text " * 40, 30)
    with ScriptedServer() as server:
        ratios = []
        for _ in ("cold", "warm"):
            counter = ServerCounter(server.url, cache_dir, concurrency=2)
            counter.count(prose)
            after_prose = counter.tokens_per_byte
            counter.count(code)
            ratios.append((after_prose, counter.tokens_per_byte))
            counter.close()
    assert ratios[0] == ratios[1] and ratios[0][0] != ratios[0][1]


def test_offline_estimates_use_the_last_measured_ratio(tmp_path: Path, cache_dir: Path) -> None:
    repo = make_module_repo(tmp_path / "proj", modules=60)
    with ScriptedServer() as server:
        exact = pack_repository(repo, PackOptions(cache_dir=cache_dir, server_url=server.url))
    offline = pack_repository(repo, PackOptions(cache_dir=cache_dir))
    assert offline.stats.counts == "estimated"
    assert offline.stats.tokens_per_byte == pytest.approx(exact.stats.tokens_per_byte)
    assert abs(offline.stats.total_tokens - exact.stats.total_tokens) < exact.stats.total_tokens * 0.05


def test_cli_writes_text_and_stats(tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.cli import app

    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_dir))
    repo = make_repo(tmp_path / "repo")
    output, stats = tmp_path / "pack.md", tmp_path / "stats.json"
    arguments = ["pack", str(repo), "--format", "markdown", "--output", str(output), "--stats", str(stats)]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    # The commit closes the text: at its top it would make every commit's prefix differ from the first line.
    text = output.read_text()
    assert text.startswith("# Repository\n") and text.endswith(f"Repository at commit {_head(repo)}.\n")
    assert "## File: pkg/geometry.py" in output.read_text()
    loaded = json.loads(stats.read_text())
    assert loaded["files_full"] == loaded["files_listed"] == 5
    assert loaded["counts"] == "estimated"
    assert set(loaded["elapsed_s"]) >= {"list", "read", "count", "render"}

    printed = CliRunner().invoke(app, ["pack", str(repo)])
    assert printed.exit_code == 0
    assert '<file path="pkg/report.py">' in printed.stdout

    failed = CliRunner().invoke(app, ["pack", str(tmp_path / "nowhere")])
    assert failed.exit_code == 2
    assert "is not a directory" in failed.output


def _noting_processes(monkeypatch: pytest.MonkeyPatch, notes: Path) -> Callable[[], dict[str, set[int]]]:
    """The packer's per-file work (reads, outlines) notes which process did each item; the function returned tells
    (and forgets) which processes did each kind of work since it was last called."""
    from agent.packing import inventory, repomap

    def noting_of(name: str, work: Callable[[object, int], object]) -> Callable[[object, int], object]:
        def noting(context: object, index: int) -> object:
            with notes.open("a") as file:  # appends of a line each: whole lines, whichever process writes
                file.write(f"{name} {os.getpid()}\n")
            return work(context, index)

        return noting

    for module, name in ((inventory, "_read_and_judge"), (repomap, "_outline_of")):
        monkeypatch.setattr(module, name, noting_of(name, getattr(module, name)))

    def processes() -> dict[str, set[int]]:
        seen: dict[str, set[int]] = {}
        for line in notes.read_text().splitlines():
            name, pid = line.split()
            seen.setdefault(name, set()).add(int(pid))
        notes.write_text("")
        return seen

    notes.write_text("")
    return processes


def test_worker_processes_do_not_change_the_pack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small repository is read and outlined in this process, two cores or not (forking workers would cost more
    than the work); with the work past the pools' thresholds, worker processes do it, and the pack is the same."""
    from agent.packing import inventory, repomap, workers

    monkeypatch.setattr(workers, "worker_count", lambda: 2)
    processes = _noting_processes(monkeypatch, tmp_path / "processes")
    repo = make_module_repo(tmp_path / "proj", modules=40)
    options = PackOptions(cache_dir=tmp_path / "in-process", budget_tokens=1500, task="Widget07")
    in_process = pack_repository(repo, options)
    assert in_process.stats.files_outline > 0
    assert processes() == {"_read_and_judge": {os.getpid()}, "_outline_of": {os.getpid()}}

    monkeypatch.setattr(inventory, "MIN_POOL_READS", 2)
    monkeypatch.setattr(repomap, "MIN_POOL_OUTLINE_BYTES", 1)
    forked = pack_repository(repo, options.model_copy(update={"cache_dir": tmp_path / "forked"}))
    seen = processes()
    assert set(seen) == {"_read_and_judge", "_outline_of"}
    assert all(os.getpid() not in pids for pids in seen.values()), seen
    assert forked.text == in_process.text


def _churned_repo(path: Path) -> Path:
    """b.py and z.py unchanged since the first commit, a.py edited in the second, m.py added in the third (made
    once per session)."""
    return copy_of_template(("churned_repo",), path, _churned_history)


def _churned_history(path: Path) -> None:
    path.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    for name in ("a", "b", "z"):
        (path / f"{name}.py").write_text(f"def {name}():\n    return '{name}'\n")
    commit_all(path, "first")
    (path / "a.py").write_text("def a():\n    return 'a, edited'\n")
    commit_all(path, "second")
    (path / "m.py").write_text("def m():\n    return 'm'\n")
    commit_all(path, "third")


def _file_order(text: str) -> list[str]:
    return [line.split('"')[1] for line in text.splitlines() if line.startswith("<file path=")]


def _common_prefix(first: str, second: str) -> int:
    return next(
        (at for at, (one, other) in enumerate(zip(first, second, strict=False)) if one != other),
        min(len(first), len(second)),
    )


def test_files_unchanged_longest_come_first_deterministically(tmp_path: Path) -> None:
    repo = _churned_repo(tmp_path / "repo")
    cold = pack_repository(repo, PackOptions(cache_dir=tmp_path / "cache"))
    assert _file_order(cold.text) == ["b.py", "z.py", "a.py", "m.py"]
    warm = pack_repository(repo, PackOptions(cache_dir=tmp_path / "cache"))
    elsewhere = pack_repository(repo, PackOptions(cache_dir=tmp_path / "other-cache"))
    assert warm.text == cold.text == elsewhere.text
    assert _file_order(pack_repository(repo, PackOptions(cache_dir=tmp_path / "c", order="path")).text) == [
        "a.py",
        "b.py",
        "m.py",
        "z.py",
    ]


def test_an_edit_to_a_churned_file_keeps_the_stable_prefix_byte_identical(tmp_path: Path) -> None:
    repo = _churned_repo(tmp_path / "repo")
    before = {
        order: pack_repository(repo, PackOptions(cache_dir=tmp_path / order, order=order)).text
        for order in ("churn", "path")
    }
    (repo / "a.py").write_text("def a():\n    return 'a, edited again'\n")
    commit_all(repo, "fourth")
    after = {
        order: pack_repository(repo, PackOptions(cache_dir=tmp_path / order, order=order)).text
        for order in ("churn", "path")
    }
    stable = after["churn"].index('<file path="a.py">')
    # Churn order: b.py, z.py and m.py stay in front, unchanged; only the edited file (now last) and the commit differ.
    assert _file_order(after["churn"]) == ["b.py", "z.py", "m.py", "a.py"]
    assert _common_prefix(before["churn"], after["churn"]) >= after["churn"].index('<file path="m.py">')
    assert after["churn"].index('<file path="m.py">') < stable
    # Path order: a.py comes first, so the prefix differs from its first file on.
    assert _common_prefix(before["path"], after["path"]) < after["path"].index('<file path="b.py">')


def test_tier_boundaries_end_where_an_age_class_ends(tmp_path: Path) -> None:
    """A saved prefix is kept where each tier of the churn order ends (agent/server/kv_cache.py): the offsets fall
    between files, after the files unchanged for 100 and for 10 commits, and stay put when only newer files
    change."""
    repo = tiered_repo(tmp_path / "repo")
    packed = pack_repository(repo, PackOptions(cache_dir=tmp_path / "cache"))
    text, boundaries = packed.text, packed.boundaries
    assert len(boundaries) == 2 and boundaries == sorted(boundaries)
    assert _file_order(text[: boundaries[0]]) == [f"stable/{name}.py" for name in "abcd"]
    assert _file_order(text[boundaries[0] : boundaries[1]]) == [f"middle/{name}.py" for name in "xyz"]
    assert text[boundaries[0] :].startswith('<file path="middle/x.py">')
    assert text[boundaries[1] :].startswith('<file path="hot.py">')
    (repo / "hot.py").write_text((repo / "hot.py").read_text().replace("value + 1\n", "value + 100\n"))
    commit_all(repo, "edit hot.py")
    later = pack_repository(repo, PackOptions(cache_dir=tmp_path / "cache"))
    assert later.boundaries == boundaries and later.text[: boundaries[1]] == text[: boundaries[1]]
    by_path = pack_repository(repo, PackOptions(cache_dir=tmp_path / "by-path", order="path"))
    assert by_path.boundaries == [], "path order has no tiers"


def test_a_file_changed_in_the_work_tree_comes_last(tmp_path: Path) -> None:
    repo = _churned_repo(tmp_path / "repo")
    (repo / "b.py").write_text("def b():\n    return 'uncommitted'\n")
    packed = pack_repository(repo, PackOptions(cache_dir=tmp_path / "cache"))
    assert _file_order(packed.text) == ["z.py", "a.py", "m.py", "b.py"]


def test_cli_order_path_keeps_the_path_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.cli import app

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    repo = _churned_repo(tmp_path / "repo")
    by_churn = CliRunner().invoke(app, ["pack", str(repo)])
    by_path = CliRunner().invoke(app, ["pack", str(repo), "--order", "path"])
    assert by_churn.exit_code == by_path.exit_code == 0
    assert _file_order(by_churn.stdout) == ["b.py", "z.py", "a.py", "m.py"]
    assert _file_order(by_path.stdout) == ["a.py", "b.py", "m.py", "z.py"]
    refused = CliRunner().invoke(app, ["pack", str(repo), "--order", "size"])
    assert refused.exit_code == 2


def test_a_selection_still_correcting_after_its_rounds_falls_back_to_counting_every_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent.packing import full_costs, packer

    monkeypatch.setattr(full_costs, "SAMPLE_MIN_BYTES", 8 * 1024)
    monkeypatch.setattr(packer, "MAX_CORRECTION_ROUNDS", 1)
    repo = make_module_repo(tmp_path / "proj", modules=60)
    with ScriptedServer() as server:
        options = PackOptions(cache_dir=tmp_path / "cache", server_url=server.url, budget_tokens=4000)
        packed = pack_repository(repo, options)
    counted = {text.split("\n", 1)[0] for text in server.tokenized if _whole_file(text)}
    assert len(counted) == packed.stats.files_listed == 61
    assert packed.stats.files_path_only > 0 and tokens_of(packed.text) <= packed.stats.total_tokens <= 4000


def test_a_partial_pack_orders_files_alike_for_every_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Within an age, files follow a task-free ranking in bands: the hub every module imports comes first though its
    path sorts last, and the files two tasks both show come in the same order."""
    from agent.packing import churn

    monkeypatch.setattr(churn, "RANK_BAND", 1)
    files = {"proj/zhub.py": "def hub_function(value):\n    return value\n"}
    for number in range(40):
        body = [f"from proj.zhub import hub_function\n\n\nclass Widget{number:02d}:\n"]
        body += [f"    def method_{line}(self):\n        return hub_function({line})\n\n" for line in range(12)]
        files[f"proj/m{number:02d}.py"] = "".join(body)
    repo = make_repo(tmp_path / "proj", files)
    orders, views = [], []
    for task in ("Rename Widget05", "Speed up Widget33"):
        packed = pack_repository(repo, PackOptions(cache_dir=tmp_path / "cache", budget_tokens=4000, task=task))
        assert packed.stats.files_outline > 0  # does not fit: the task steers which files stay whole
        orders.append(_file_order(packed.text))
        views.append({stat.path: stat.view for stat in packed.stats.files})
    assert views[0] != views[1]
    assert orders[0][0] == orders[1][0] == "proj/zhub.py"
    common = set(orders[0]) & set(orders[1])
    assert len(common) > 10
    assert [path for path in orders[0] if path in common] == [path for path in orders[1] if path in common]


@pytest.fixture
def tokenizer_server(llama_server_plain: ServerState) -> str:
    return llama_server_plain.url


@pytest.mark.llama_server
def test_budget_never_exceeded_by_the_real_tokenizer(tokenizer_server: str, tmp_path: Path) -> None:
    repo = make_module_repo(tmp_path / "proj", modules=40)
    cache_dir = tmp_path / "cache"
    with LlamaServerAPI(tokenizer_server) as api:
        for budget in (200, 700, 2000, 5000, 9000):
            for format_name in ("xml", "markdown"):
                options = PackOptions(
                    cache_dir=cache_dir,
                    server_url=tokenizer_server,
                    budget_tokens=budget,
                    format=format_name,
                    task="Widget12",
                )
                packed = pack_repository(repo, options)
                assert packed.stats.counts == "exact"
                assert packed.stats.tokenizer is not None and packed.stats.tokenizer.endswith(".gguf")
                assert packed.stats.total_tokens <= budget
                whole = len(api.tokenize(packed.text))
                assert whole <= budget, (budget, format_name)
                # Pieces counted apart add up to the whole (give or take merges at the seams).
                assert whole <= packed.stats.total_tokens <= whole + packed.stats.files_full + 64


@pytest.mark.llama_server
def test_window_sized_budget_and_exact_counts_of_a_planted_repo(tokenizer_server: str, tmp_path: Path) -> None:
    repo = make_planted_repo(tmp_path / "planted")
    packed = pack_repository(repo, PackOptions(cache_dir=tmp_path / "cache", server_url=tokenizer_server))
    with LlamaServerAPI(tokenizer_server) as api:
        n_ctx = api.context_size()
        assert packed.stats.budget_tokens == context_budget(n_ctx, "max", None)
        assert packed.stats.total_tokens == pytest.approx(len(api.tokenize(packed.text)), abs=8)
        geometry = next(stat for stat in packed.stats.files if stat.path == "pkg/geometry.py")
        rendered = f'<file path="pkg/geometry.py">\n{(repo / "pkg/geometry.py").read_text()}</file>\n'
        assert geometry.tokens_full == len(api.tokenize(rendered))


@pytest.mark.llama_server
def test_warm_run_reuses_every_count(tokenizer_server: str, tmp_path: Path) -> None:
    repo = make_module_repo(tmp_path / "proj", modules=30)
    options = PackOptions(cache_dir=tmp_path / "cache", server_url=tokenizer_server, budget_tokens=3000)
    cold = pack_repository(repo, options)
    warm = pack_repository(repo, options)
    assert warm.text == cold.text
    assert warm.stats.model_dump(exclude={"elapsed_s"}) == cold.stats.model_dump(exclude={"elapsed_s"})


def _path_list(text: str) -> bool:
    """The list of files not shown (or of every file) sent to /tokenize: path lines only."""
    lines = text.splitlines()
    return len(lines) > 1 and all(line.startswith(("proj/", "README")) for line in lines)


def test_selection_rounds_count_the_list_of_unshown_paths_only_once_settled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While exact counts still change the selection, the list of unshown paths is estimated (with the tokens per
    byte of the list of every path, counted once): it is counted exactly once the selection settles."""
    from agent.packing import full_costs

    monkeypatch.setattr(full_costs, "SAMPLE_MIN_BYTES", 8 * 1024)
    repo = make_module_repo(tmp_path / "proj", modules=60)
    for number in range(8):  # the sample's ratio is wrong for these: exact counts change the selection
        (repo / "proj" / f"wide{number}.py").write_text(f"名前{number} = '日本語のテキスト'\n" * 60)
    commit_all(repo, "wide files")
    files = len(list((repo / "proj").iterdir())) + 1  # and the README
    with ScriptedServer() as server:
        for budget in (1500, 4000, 9000):
            server.tokenized.clear()
            options = PackOptions(cache_dir=tmp_path / str(budget), server_url=server.url, budget_tokens=budget)
            packed = pack_repository(repo, options)
            sent = server.tokenized
            every_path = [at for at, text in enumerate(sent) if _path_list(text) and text.count("\n") == files]
            unshown = [at for at, text in enumerate(sent) if _path_list(text) and text.count("\n") < files]
            whole_files = [at for at, text in enumerate(sent) if _whole_file(text)]
            assert len(every_path) == 1
            # The selection was corrected (whole files counted after the first selection), and the list of
            # unshown paths was counted only after the last of those corrections: once, or once per shrink.
            assert whole_files[-1] > every_path[0]
            assert unshown and min(unshown) > whole_files[-1] and len(unshown) <= 2, (budget, unshown, whole_files)
            assert packed.stats.total_tokens <= budget and tokens_of(packed.text) <= budget
            assert packed.stats.files_path_only > 0


def test_next_files_in_rank_are_counted_with_the_first_selection() -> None:
    from agent.packing.packer import _next_in_rank

    ranked = [4, 0, 3, 1, 2, 5]
    views = {4: "full", 0: "full", 3: "outline", 1: "path", 2: "path", 5: "path"}
    costs = [10, 50, 30, 40, 10, 5]
    # After the whole ones, in rank order while their estimates fit: 3 (40), then 1 (50) is too large alone for
    # what is left (20), 2 (30) too, 5 (5) fits.
    assert _next_in_rank(ranked, views, costs, 60) == [3, 5]  # type: ignore[arg-type]
    assert _next_in_rank(ranked, views, costs, 0) == []  # type: ignore[arg-type]


def test_long_texts_are_cut_into_chunks_only_at_seams() -> None:
    from agent.packing.server_tokens import seam_chunks

    pieces = ["<repository>\n"] + [f'<file path="m{n}.py">\n' + "x = 1\n" * 20 + "</file>\n" for n in range(12)]
    pieces += ["<files_not_shown>\n", "a.py\n", " spaced.py\n", "\n", "</files_not_shown>\n", "</repository>\n"]
    runs = seam_chunks(pieces, 4, 100)
    assert len(runs) == 4
    assert runs[0][0] == 0 and runs[-1][1] == len(pieces)
    assert all(end == start for (_, end), (start, _) in itertools.pairwise(runs))
    sizes = [sum(len(piece) for piece in pieces[start:end]) for start, end in runs]
    assert max(sizes) - min(sizes) <= 2 * len(pieces[1])  # about equal shares
    for start, _ in runs[1:]:
        assert pieces[start - 1].endswith("\n") and not pieces[start][0].isspace()
    # Never next to more whitespace: "\n" + " spaced.py", "\n" + "\n" or "\n\n" + "<" could tokenize otherwise
    # inside the whole text than apart.
    tail = seam_chunks(pieces[-6:], 6, 1)
    starts = [pieces[-6:][start] for start, _ in tail]
    assert starts == ["<files_not_shown>\n", "a.py\n", "</repository>\n"]
    assert tail[-1][1] == 6
    # A short text stays one request.
    assert seam_chunks(pieces, 4, 10**6) == [(0, len(pieces))]


PACK_HEAVY_MODULES = ("git", "agent.cli", "agent.review", "sandbox.cli", "agent.protocol.config", "httpx")


@dataclass(frozen=True)
class PackCommand:
    returncode: int
    stderr: str
    output: Path


@started_early
def pack_command() -> Callable[[], PackCommand]:
    """`python -m agent`'s main() packing a small repository with a (scripted) server, started as collection
    ends; it prints, as it exits, which of PACK_HEAVY_MODULES it loaded."""
    folder = Path(tempfile.mkdtemp(prefix="pack-command-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    repo = make_module_repo(folder / "proj", modules=3)
    server = ScriptedServer().__enter__()
    script = (
        "import atexit, sys\n"
        f"loaded = lambda: sorted(name for name in sys.modules if name in {PACK_HEAVY_MODULES!r})\n"
        "atexit.register(lambda: print(loaded(), file=sys.stderr))\n"
        f"sys.argv = ['refactor-agent', 'pack', {str(repo)!r}, '--output', {str(folder / 'out.xml')!r},"
        f" '--server', {server.url!r}, '--budget', '100000']\n"
        "from agent.__main__ import main\n"
        "main()\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(folder / "xdg")}
    process = subprocess.Popen(
        [*BACKGROUND, sys.executable, "-c", script],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )

    def finished() -> PackCommand:
        try:
            _, stderr = process.communicate(timeout=120)
        finally:
            server.__exit__(None, None, None)
        return PackCommand(process.returncode, stderr, folder / "out.xml")

    return finished


def test_python_m_agent_pack_does_not_load_the_other_commands(pack_command: PackCommand) -> None:
    """`pack` is timed per run (warm < 1 s): it loads neither the other commands (git, the review, the sandbox),
    nor every configuration model, nor an HTTP library beyond the standard one, even with a server."""
    assert pack_command.returncode == 0, pack_command.stderr
    assert "(exact, budget 100000)" in pack_command.stderr
    assert pack_command.stderr.strip().splitlines()[-1] == "[]"
    assert "proj/mod02.py" in pack_command.output.read_text()


def test_a_warm_run_does_not_rewrite_the_calibration(tmp_path: Path, cache_dir: Path) -> None:
    repo = make_module_repo(tmp_path / "proj", modules=60)
    calibration = cache_dir / "calibration.json"
    with ScriptedServer() as server:
        options = PackOptions(cache_dir=cache_dir, server_url=server.url, budget_tokens=4000)
        pack_repository(repo, options)
        written = calibration.stat().st_mtime_ns
        os.utime(calibration, ns=(written - 10**9, written - 10**9))  # a rewrite would move it on, whatever the clock
        pack_repository(repo, options)
    assert calibration.stat().st_mtime_ns == written - 10**9
    assert 0 < json.loads(calibration.read_text())["tokens_per_byte"] < 2


@pytest.mark.llama_server
def test_whole_text_counted_in_chunks_at_once_equals_one_request(
    tokenizer_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The packed text goes to /tokenize in chunks cut at file seams, several in flight; for this tokenizer the
    sum is the count of the whole text in one request, to the token (xml; markdown where its list has seams)."""
    from agent.packing import server_tokens

    monkeypatch.setattr(server_tokens, "CHUNK_MIN_CHARS", 2048)
    sent: list[str] = []
    tokenize = server_tokens.ServerCounter._tokenize

    def recording(self: server_tokens.ServerCounter, text: str) -> int:
        sent.append(text)
        return tokenize(self, text)

    monkeypatch.setattr(server_tokens.ServerCounter, "_tokenize", recording)
    repo = make_module_repo(tmp_path / "proj", modules=40)
    with LlamaServerAPI(tokenizer_server) as api:
        for format_name in ("xml", "markdown"):
            for budget in (3000, 9000):
                options = PackOptions(
                    cache_dir=tmp_path / f"cache-{format_name}-{budget}",
                    server_url=tokenizer_server,
                    budget_tokens=budget,
                    format=format_name,
                )
                sent.clear()
                packed = pack_repository(repo, options)
                text = packed.text
                chunks = [piece for piece in sent if text.startswith(piece) or piece.endswith(text[-200:])]
                if format_name == "xml":  # markdown's pieces end in a blank line: no seam between its files
                    assert text not in sent and len(chunks) >= 2  # the whole text went in parts
                assert packed.stats.total_tokens == len(api.tokenize(text)) <= budget


# --- bounded work on hostile input: time grows with the input, never faster (ratios of times, never a time) ---

# Lines that made a definition pattern retry every way to split one run of bytes (one 100 KB line of blanks in a
# JavaScript file took minutes), and lines full of places where a pattern may start.
PATHOLOGICAL_LINES = (
    lambda n: " " * n,
    lambda n: "function" + "\t" * n + "(",
    lambda n: "type a" + " " * n + "!",
    lambda n: "const a:" * (n // 8),
    lambda n: "const a=(=" * (n // 10),
    lambda n: "type a<" * (n // 7),
    lambda n: "impl<" * (n // 5),
    lambda n: " " + "static " * (n // 7) + "(",
    lambda n: " public " + "a " * (n // 2),
    lambda n: " " * n + "def",
    lambda n: "func" + " " * n + "(" + "x" * n,
)
LANGUAGES = ("python", "javascript", "typescript", "tsx", "go", "rust", "java")
GROWTH = 8
# Linear work takes about GROWTH times as long (less with a fixed start-up cost, somewhat more once the data
# outgrows the processor's caches); quadratic work GROWTH ** 2 = 64 times.
MAX_TIME_RATIO = GROWTH * 3


def _time_ratio(work: Callable[[int], object], size: int, repeats: int = 5) -> float:
    """How many times as long `work` takes on GROWTH times the input, in this process's processor time (the
    machine's other load would stretch wall time, the longer runs most): the least of a few runs each, the larger
    stopped as soon as one run is inside the limit."""
    small = large = math.inf
    for _ in range(repeats):
        started = time.process_time()
        work(size)
        small = min(small, time.process_time() - started)
    for _ in range(repeats):
        started = time.process_time()
        work(size * GROWTH)
        large = min(large, time.process_time() - started)
        if large < small * MAX_TIME_RATIO:
            break
    return large / small


@pytest.mark.parametrize("language", LANGUAGES)
def test_symbols_of_pathological_lines_take_time_in_proportion_to_their_length(language: str) -> None:
    def symbols(n: int) -> object:
        return extract_symbols(language, "\n".join(line(n) for line in PATHOLOGICAL_LINES).encode() + b"\n")

    ratio = _time_ratio(symbols, 4_000)
    assert ratio < MAX_TIME_RATIO, f"{GROWTH}x the input took {ratio:.1f}x the time"


def test_pack_time_grows_in_proportion_to_a_long_blank_line(tmp_path: Path) -> None:
    functions = "".join(f"function f{number}() {{ return {number}; }}\n" for number in range(3000))
    packs = iter(range(1000))

    def pack(n: int) -> object:
        repo = tmp_path / f"repo-{n}"
        if not repo.exists():
            make_repo(repo, {"app.js": functions + " " * n + "\nfunction g() {}\n"})
        # Over budget, so the files are ranked by their symbols; a cache of its own per pack, or a warm run would
        # read them back instead of extracting them.
        return pack_repository(repo, PackOptions(cache_dir=tmp_path / f"cache-{next(packs)}", budget_tokens=2000))

    ratio = _time_ratio(pack, 8_000, repeats=3)
    assert ratio < MAX_TIME_RATIO, f"{GROWTH}x the line took {ratio:.1f}x the time"


def test_a_line_past_the_limit_is_shown_cut_and_the_file_says_so(tmp_path: Path, cache_dir: Path) -> None:
    long_line = "x = [" + "1, " * 40_000 + "]"
    # Enough ordinary lines that the file does not pass for minified (which is left out whole).
    code = "".join(f"def f{number}():\n    return {number}\n" for number in range(600))
    repo = make_repo(tmp_path / "repo", {"data.py": f"{code}{long_line}\n", "ok.py": "y = 2\n"})
    text = pack_repository(repo, PackOptions(cache_dir=cache_dir)).text
    assert f'<file path="data.py" note="lines longer than {MAX_SHOWN_LINE_CHARS} characters are cut">' in text
    assert f"{long_line[:MAX_SHOWN_LINE_CHARS]}[... {len(long_line) - MAX_SHOWN_LINE_CHARS} more characters" in text
    assert f"{code}{long_line[:100]}" in text and '<file path="ok.py">\ny = 2\n</file>' in text
    assert len(text) < len(code) + 2 * MAX_SHOWN_LINE_CHARS


def test_a_pack_on_the_default_cache_writes_the_sessions_folder_never_the_users(tmp_path: Path) -> None:
    """conftest.py gives the session its own $XDG_CACHE_HOME: the packer's default cache (counts, outlines, churn,
    the estimator's calibration) is not the user's, whose contents would change what a test sees."""
    packed = pack_repository(make_repo(tmp_path / "repo"), PackOptions())
    assert packed.stats.files_full == 5
    folder = default_cache_dir()
    assert not folder.is_relative_to(USER_CACHE)
    assert (folder / "pack-cache.sqlite3").is_file()
