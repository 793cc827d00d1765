"""Exact token counts from the target model's own tokenizer: llama-server's /tokenize, a few requests in flight.

Counts are cached on disk per tokenizer and per rendered piece (git blob id + wrapper), so an unchanged file is
never sent twice across runs and tasks. A long text made of pieces (the packed repository) is sent in a few
chunks at once, cut only at seams the tokenizer is seen to keep (see seam_chunks): llama-server tokenizes each
request on its own HTTP thread, so two chunks take half the time of the whole on two cores.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from agent.llama_api import LlamaServerAPI, ServerError, http_client
from agent.packing.cache import ContentCache
from agent.packing.options import PackError
from agent.packing.tokens import Calibration, CountRequest

CALIBRATION_MIN_BYTES = 20_000  # a smaller sample says more about its few files than about the tokenizer
TOKENIZER_PROBE = "def __init__(self, x: int) -> None:\n\treturn {'naïve': 12345, \"日本語\": [0x1F]}  # ✓\n"
# The probe as pieces of a pack cut at seams (see seam_chunks): counted in parts, a text counts the same as whole
# only if the tokenizer ends a token at each seam and tokenizes each part alone as it does inside the whole.
SEAM_PROBE = (
    '<repository>\n<file path="a.py">\n' + TOKENIZER_PROBE + "</file>\n",
    '<file path="b.md" view="outline">\n# Title\n</file>\n',
    "<files_not_shown>\n",
    "src/c_d.py\n",
    "- e/f-g.md\n",
    "</files_not_shown>\n",
    "</repository>\n",
)
# A chunk is worth its own request from this many characters on (a request costs about a millisecond).
CHUNK_MIN_CHARS = 64 * 1024


class ServerCounter:
    """Counts with llama-server's /tokenize, a few requests in flight, through a per-tokenizer disk cache."""

    exact = True

    def __init__(self, server_url: str, cache_dir: Path, *, concurrency: int) -> None:
        try:
            with LlamaServerAPI(server_url) as api:
                props = api.props()
                self.root = api.root
        except ServerError as exc:
            raise PackError(f"cannot count tokens: {exc}") from exc
        self._concurrency = concurrency
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self._http = http_client(self.root, timeout=600.0, limits=limits)
        self._pool = ThreadPoolExecutor(max_workers=concurrency)
        probe = self._post_tokenize("".join(SEAM_PROBE), with_pieces=True)
        self.tokenizer: str | None = str(props.get("model_path") or "unknown model")
        ids = [token["id"] if isinstance(token, dict) else token for token in probe]
        fingerprint = hashlib.sha1(json.dumps([self.tokenizer, ids]).encode(), usedforsecurity=False).hexdigest()
        self._cache = ContentCache(cache_dir / "pack-cache.sqlite3", f"tokens_{fingerprint[:20]}")
        self._seams_kept = self._keeps_seams(probe)
        self._calibration = Calibration(cache_dir)
        self._measured_bytes = 0
        self._measured_tokens = 0

    @property
    def tokens_per_byte(self) -> float:
        """Over every piece counted so far, cached or not: a warm run then sees the same ratios, in the same
        order, as the cold run did, so the selection (path estimates use it) is the same."""
        if self._measured_bytes:
            return self._measured_tokens / self._measured_bytes
        return self._calibration.load()

    def _keeps_seams(self, probe: list[Any]) -> bool:
        """Whether SEAM_PROBE's tokens end at every seam and each piece alone counts as it does inside the whole
        (probe: the whole's tokens with pieces). A tokenizer that merges across a line break, or treats the end or
        the start of a text apart, gets every text in one request. Kept per tokenizer: warm runs ask nothing."""
        # Under the "text:" keys of whole texts: a verdict about texts, not the count of a file.
        key = "text:seams:" + hashlib.sha1("".join(SEAM_PROBE).encode(), usedforsecurity=False).hexdigest()[:16]
        kept = self._cache.get_many([key]).get(key)
        if kept is None:
            alone = list(self._pool.map(self._tokenize, SEAM_PROBE))
            ends = _token_ends(probe)
            seams = list(itertools.accumulate(len(piece.encode("utf-8")) for piece in SEAM_PROBE))
            kept = 0
            if ends is not None and set(seams) <= set(ends):
                before = [bisect.bisect_right(ends, seam) for seam in seams]  # tokens up to each seam
                kept = int([after - start for start, after in zip([0, *before[:-1]], before, strict=True)] == alone)
            self._cache.put(key, kept)
        return bool(kept)

    def _post_tokenize(self, text: str, *, with_pieces: bool = False) -> list[Any]:
        try:
            response = self._http.post(
                "/tokenize", json={"content": text, "add_special": False, "with_pieces": with_pieces}
            )
            response.raise_for_status()
            return response.json()["tokens"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise PackError(f"llama-server /tokenize failed at {self.root}: {exc}") from exc

    def _tokenize(self, text: str) -> int:
        try:
            response = self._http.post("/tokenize", json={"content": text, "add_special": False})
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise PackError(f"llama-server /tokenize failed at {self.root}: {exc}") from exc
        # {"tokens":[1,2,3]}: counting commas spares decoding a million-token JSON array.
        body = response.content
        return 0 if b"[]" in body else body.count(b",") + 1

    def count_text(self, text: str) -> int:
        return self.count_joined([text])

    def count_joined(self, pieces: Sequence[str]) -> int:
        # The whole packed text, the list of unshown paths and the wrappers are counted on every run: a warm run
        # finds them here instead of waiting for a round trip each.
        text = "".join(pieces)
        key = "text:" + hashlib.sha1(text.encode("utf-8", errors="surrogatepass"), usedforsecurity=False).hexdigest()
        cached = self._cache.get_many([key]).get(key)
        if cached is None:
            parts = self._concurrency if self._seams_kept else 1
            chunks = ["".join(pieces[start:end]) for start, end in seam_chunks(pieces, parts, CHUNK_MIN_CHARS)]
            cached = self._tokenize(text) if len(chunks) == 1 else sum(self._pool.map(self._tokenize, chunks))
            self._cache.put(key, cached)
        return int(cached)

    def count(self, requests: list[CountRequest]) -> list[int]:
        cached = self._cache.get_many(request.key for request in requests)
        counts: list[int | None] = [cached.get(request.key) for request in requests]
        missing = [index for index, count in enumerate(counts) if count is None]

        if missing:
            measured = self._pool.map(lambda index: self._tokenize(requests[index].render()), missing)
            for index, tokens in zip(missing, measured, strict=True):
                counts[index] = tokens
                self._cache.put(requests[index].key, tokens)
        done = [count for count in counts if count is not None]
        # Size hints, not rendered sizes: a cached piece is not rendered, and estimates multiply hints too.
        self._measured_tokens += sum(done)
        self._measured_bytes += sum(request.size_hint for request in requests)
        return done

    def close(self) -> None:
        self._pool.shutdown()
        self._cache.close()
        if self._measured_bytes >= CALIBRATION_MIN_BYTES:
            self._calibration.save(self.tokens_per_byte, self.tokenizer)
        self._http.close()


def seam_chunks(pieces: Sequence[str], parts: int, min_chars: int) -> list[tuple[int, int]]:
    """Up to `parts` runs of consecutive pieces (start, end), of about equal length and at least min_chars each.
    A run starts only at a seam: after a piece that ends a line with a visible character before the line break,
    before one that opens with a visible character (`<file ...`, a path). More whitespace around a seam could be
    one token in the whole text, and trailing whitespace is split apart at the end of a text by GPT-2-like
    tokenizers ("```\n\n" alone is not "```\n\n" inside): markdown's pieces, which end in a blank line, stay
    together."""
    total = sum(len(piece) for piece in pieces)
    parts = max(1, min(parts, total // max(1, min_chars)))
    runs, start, before = [], 0, 0  # before: characters ahead of the piece at hand
    for index, piece in enumerate(pieces):
        previous = pieces[index - 1] if index else ""
        at_seam = previous.endswith("\n") and previous[-2:-1].strip() != "" and piece[:1].strip() != ""
        # Cut where the next equal share ends, at the seam nearest to it (the piece's middle crosses it).
        if at_seam and len(runs) < parts - 1 and before + len(piece) / 2 >= total * (len(runs) + 1) / parts:
            runs.append((start, index))
            start = index
        before += len(piece)
    runs.append((start, len(pieces)))
    return runs


def _token_ends(tokens: list[Any]) -> list[int] | None:
    """Byte offsets where the tokens (with their pieces) end; None when the server did not say."""
    ends, offset = [], 0
    for token in tokens:
        piece = token.get("piece") if isinstance(token, dict) else None
        if isinstance(piece, str):
            offset += len(piece.encode("utf-8", errors="surrogatepass"))
        elif isinstance(piece, list):  # the bytes of a partial UTF-8 character
            offset += len(piece)
        else:
            return None
        ends.append(offset)
    return ends
