"""Token counts: exact from the target model's own tokenizer (llama-server /tokenize), or estimated offline.

Exact counts are cached on disk per tokenizer and per rendered piece (git blob id + wrapper), so an unchanged
file is never sent twice across runs and tasks. Offline estimates use a bytes-to-tokens ratio measured the
last time a server was seen.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agent.safety.private_dirs import private_dir

# Bytes per token of source code under common BPE vocabularies; replaced by a measured ratio once a server is seen.
DEFAULT_TOKENS_PER_BYTE = 0.3


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

    def count_joined(self, pieces: Sequence[str]) -> int:
        """Tokens of "".join(pieces): exactly the text's count, the pieces only say where it may be cut."""
        ...

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
        text = json.dumps({"tokens_per_byte": ratio, "tokenizer": tokenizer})
        with contextlib.suppress(OSError):
            if self.path.read_text() == text:  # a warm run measures what the cold one did: no write to wait for
                return
        private_dir(self.path.parent)
        self.path.write_text(text)


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

    def count_joined(self, pieces: Sequence[str]) -> int:
        return self.count_text("".join(pieces))

    def close(self) -> None:
        return None
