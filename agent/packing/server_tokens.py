"""Exact token counts from the target model's own tokenizer: llama-server's /tokenize, a few requests in flight.

Counts are cached on disk per tokenizer and per rendered piece (git blob id + wrapper), so an unchanged file is
never sent twice across runs and tasks.
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from agent.llama_api import LlamaServerAPI, ServerError, http_client
from agent.packing.cache import ContentCache
from agent.packing.options import PackError
from agent.packing.tokens import Calibration, CountRequest

CALIBRATION_MIN_BYTES = 20_000  # a smaller sample says more about its few files than about the tokenizer
TOKENIZER_PROBE = "def __init__(self, x: int) -> None:\n\treturn {'naïve': 12345, \"日本語\": [0x1F]}  # ✓\n"


class ServerCounter:
    """Counts with llama-server's /tokenize, a few requests in flight, through a per-tokenizer disk cache."""

    exact = True

    def __init__(self, server_url: str, cache_dir: Path, *, concurrency: int) -> None:
        try:
            with LlamaServerAPI(server_url) as api:
                props = api.props()
                probe = api.tokenize(TOKENIZER_PROBE)
                self.root = api.root
        except ServerError as exc:
            raise PackError(f"cannot count tokens: {exc}") from exc
        self.tokenizer: str | None = str(props.get("model_path") or "unknown model")
        fingerprint = hashlib.sha1(json.dumps([self.tokenizer, probe]).encode(), usedforsecurity=False).hexdigest()
        self._cache = ContentCache(cache_dir / "pack-cache.sqlite3", f"tokens_{fingerprint[:20]}")
        self._calibration = Calibration(cache_dir)
        self._concurrency = concurrency
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self._http = http_client(self.root, timeout=600.0, limits=limits)
        self._measured_bytes = 0
        self._measured_tokens = 0

    @property
    def tokens_per_byte(self) -> float:
        """Over every piece counted so far, cached or not: a warm run then sees the same ratios, in the same
        order, as the cold run did, so the selection (path estimates use it) is the same."""
        if self._measured_bytes:
            return self._measured_tokens / self._measured_bytes
        return self._calibration.load()

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
        # The whole packed text, the list of unshown paths and the wrappers are counted on every run: a warm run
        # finds them here instead of waiting for a round trip each.
        key = "text:" + hashlib.sha1(text.encode("utf-8", errors="surrogatepass"), usedforsecurity=False).hexdigest()
        cached = self._cache.get_many([key]).get(key)
        if cached is None:
            cached = self._tokenize(text)
            self._cache.put(key, cached)
        return int(cached)

    def count(self, requests: list[CountRequest]) -> list[int]:
        cached = self._cache.get_many(request.key for request in requests)
        counts: list[int | None] = [cached.get(request.key) for request in requests]
        missing = [index for index, count in enumerate(counts) if count is None]

        if missing:
            with ThreadPoolExecutor(max_workers=self._concurrency) as pool:
                measured = pool.map(lambda index: self._tokenize(requests[index].render()), missing)
                for index, tokens in zip(missing, measured, strict=True):
                    counts[index] = tokens
                    self._cache.put(requests[index].key, tokens)
        done = [count for count in counts if count is not None]
        # Size hints, not rendered sizes: a cached piece is not rendered, and estimates multiply hints too.
        self._measured_tokens += sum(done)
        self._measured_bytes += sum(request.size_hint for request in requests)
        return done

    def close(self) -> None:
        self._cache.close()
        if self._measured_bytes >= CALIBRATION_MIN_BYTES:
            self._calibration.save(self.tokens_per_byte, self.tokenizer)
        self._http.close()
