"""The packer against a real llama-server (SmolLM2-135M): exact counts from the model's own tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.pack_repos import make_module_repo, make_planted_repo

from agent.llama_api import LlamaServerAPI
from agent.packing import PackOptions, pack_repository
from agent.packing.budget import context_budget
from agent.server.launcher import ServerState

pytestmark = pytest.mark.llama_server


@pytest.fixture
def tokenizer_server(llama_server_plain: ServerState) -> str:
    return llama_server_plain.url


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


def test_window_sized_budget_and_exact_counts_of_a_planted_repo(tokenizer_server: str, tmp_path: Path) -> None:
    repo = make_planted_repo(tmp_path / "planted", tmp_path)
    packed = pack_repository(repo, PackOptions(cache_dir=tmp_path / "cache", server_url=tokenizer_server))
    with LlamaServerAPI(tokenizer_server) as api:
        n_ctx = api.context_size()
        assert packed.stats.budget_tokens == context_budget(n_ctx, "max", None)
        assert packed.stats.total_tokens == pytest.approx(len(api.tokenize(packed.text)), abs=8)
        geometry = next(stat for stat in packed.stats.files if stat.path == "pkg/geometry.py")
        rendered = f'<file path="pkg/geometry.py">\n{(repo / "pkg/geometry.py").read_text()}</file>\n'
        assert geometry.tokens_full == len(api.tokenize(rendered))


def test_warm_run_reuses_every_count(tokenizer_server: str, tmp_path: Path) -> None:
    repo = make_module_repo(tmp_path / "proj", modules=30)
    options = PackOptions(cache_dir=tmp_path / "cache", server_url=tokenizer_server, budget_tokens=3000)
    cold = pack_repository(repo, options)
    warm = pack_repository(repo, options)
    assert warm.text == cold.text
    assert warm.stats.model_dump(exclude={"elapsed_s"}) == cold.stats.model_dump(exclude={"elapsed_s"})


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
