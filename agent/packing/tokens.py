"""Token counts: exact from the target model's own tokenizer (llama-server /tokenize), or estimated offline.

Exact counts are cached on disk per tokenizer and per rendered piece (git blob id + wrapper), so an unchanged
file is never sent twice across runs and tasks. Offline estimates use a bytes-to-tokens ratio measured the
last time a server was seen.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx

from agent.llama_api import LlamaServerAPI, ServerError
from agent.packing.cache import ContentCache
from agent.packing.options import PackError

# Bytes per token of source code under common BPE vocabularies; replaced by a measured ratio once a server is seen.
DEFAULT_TOKENS_PER_BYTE = 0.3
CALIBRATION_MIN_BYTES = 20_000  # a smaller sample says more about its few files than about the tokenizer
TOKENIZER_PROBE = "def __init__(self, x: int) -> None:\n\treturn {'naïve': 12345, \"日本語\": [0x1F]}  # ✓\n"


@dataclass(frozen=True, slots=True)
class CountRequest:
    key: str  # names the rendered text: blob id + what wraps it
    render: Callable[[], str]
    size_hint: int  # bytes of the rendered text, close enough for estimates without rendering


class TokenCounter(Protocol):
    exact: bool
    tokenizer: str | None

    @property
    def tokens_per_byte(self) -> float: ...

    def count(self, requests: list[CountRequest]) -> list[int]: ...

    def count_text(self, text: str) -> int: ...

    def close(self) -> None: ...


def piece_key(blob_id: str, *wrapping: str) -> str:
    """A cache key for a rendered piece: the content's blob id plus a digest of everything around it."""
    digest = hashlib.sha1("\0".join(wrapping).encode("utf-8", errors="surrogatepass"), usedforsecurity=False)
    return f"{blob_id}:{digest.hexdigest()[:16]}"


class Calibration:
    """The last measured tokens-per-byte ratio, kept beside the caches."""

    def __init__(self, cache_dir: Path) -> None:
        self.path = cache_dir / "calibration.json"

    def load(self) -> float:
        try:
            ratio = float(json.loads(self.path.read_text())["tokens_per_byte"])
        except (OSError, ValueError, KeyError, TypeError):
            return DEFAULT_TOKENS_PER_BYTE
        return ratio if 0.01 < ratio < 2.0 else DEFAULT_TOKENS_PER_BYTE

    def save(self, ratio: float, tokenizer: str | None) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({"tokens_per_byte": ratio, "tokenizer": tokenizer}))


class EstimatingCounter:
    exact = False
    tokenizer = None

    def __init__(self, tokens_per_byte: float) -> None:
        self._ratio = tokens_per_byte

    @property
    def tokens_per_byte(self) -> float:
        return self._ratio

    def count(self, requests: list[CountRequest]) -> list[int]:
        return [math.ceil(request.size_hint * self._ratio) for request in requests]

    def count_text(self, text: str) -> int:
        return math.ceil(len(text.encode("utf-8", errors="surrogatepass")) * self._ratio)

    def close(self) -> None:
        return None


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
        self._http = httpx.Client(base_url=self.root, timeout=600.0, limits=limits)
        self._measured_bytes = 0
        self._measured_tokens = 0

    @property
    def tokens_per_byte(self) -> float:
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
        return self._tokenize(text)

    def count(self, requests: list[CountRequest]) -> list[int]:
        cached = self._cache.get_many(request.key for request in requests)
        counts: list[int | None] = [cached.get(request.key) for request in requests]
        missing = [index for index, count in enumerate(counts) if count is None]

        def measure(index: int) -> tuple[int, int]:
            text = requests[index].render()
            return self._tokenize(text), len(text.encode("utf-8", errors="surrogatepass"))

        if missing:
            with ThreadPoolExecutor(max_workers=self._concurrency) as pool:
                for index, (tokens, size) in zip(missing, pool.map(measure, missing), strict=True):
                    counts[index] = tokens
                    self._cache.put(requests[index].key, tokens)
                    self._measured_tokens += tokens
                    self._measured_bytes += size
        return [count for count in counts if count is not None]

    def close(self) -> None:
        self._cache.close()
        if self._measured_bytes >= CALIBRATION_MIN_BYTES:
            self._calibration.save(self.tokens_per_byte, self.tokenizer)
        self._http.close()


def make_counter(server_url: str | None, cache_dir: Path, *, concurrency: int) -> TokenCounter:
    if server_url is None:
        return EstimatingCounter(Calibration(cache_dir).load())
    return ServerCounter(server_url, cache_dir, concurrency=concurrency)
