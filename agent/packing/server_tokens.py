"""Exact token counts from the target model's own tokenizer: llama-server's /tokenize, a few requests in flight.

Counts are cached on disk per tokenizer and per rendered piece (git blob id + wrapper), so an unchanged file is
never sent twice across runs and tasks. A long text made of pieces (the packed repository) is sent in a few
chunks at once, cut only at seams the tokenizer is seen to keep (see seam_chunks): llama-server tokenizes each
request on its own HTTP thread, so two chunks take half the time of the whole on two cores.
"""

from __future__ import annotations

import bisect
import hashlib
import http.client
import itertools
import json
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agent.packing.cache import PACK_CACHE_FILE, ContentCache
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
REQUEST_TIMEOUT_S = 600.0  # a million-token text on a loaded machine takes seconds, never minutes
IDENTITY_TIMEOUT_S = 10.0  # /props and the probe answer at once from a server that is not hung


class ServerCounter:
    """Counts with llama-server's /tokenize, a few requests in flight, through a per-tokenizer disk cache."""

    exact = True

    def __init__(self, server_url: str, cache_dir: Path, *, concurrency: int) -> None:
        self._http = _Connections(server_url)
        self.root = self._http.root
        props = self._json("GET", "/props", None, "cannot count tokens", timeout=IDENTITY_TIMEOUT_S)
        self._concurrency = concurrency
        self._pool = ThreadPoolExecutor(max_workers=concurrency)
        probe = self._tokens_with_pieces("".join(SEAM_PROBE))
        self.tokenizer: str | None = str(props.get("model_path") or "unknown model")
        ids = [token["id"] if isinstance(token, dict) else token for token in probe]
        fingerprint = hashlib.sha1(json.dumps([self.tokenizer, ids]).encode(), usedforsecurity=False).hexdigest()
        self._cache = ContentCache(cache_dir / PACK_CACHE_FILE, f"tokens_{fingerprint[:20]}")
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

    def _json(
        self, method: str, path: str, body: dict[str, Any] | None, failure: str, *, timeout: float
    ) -> dict[str, Any]:
        status, data = self._http.request(method, path, body, failure, timeout=timeout)
        if status != 200:
            loading = " (still loading the model; retry in a moment)" if status == 503 else ""
            raise PackError(f"{failure}: llama-server at {self.root} answered {path} with HTTP {status}{loading}")
        try:
            answer = json.loads(data)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise PackError(f"{failure}: llama-server at {self.root} sent no JSON object for {path}")
        return answer

    def _tokens_with_pieces(self, text: str) -> list[Any]:
        body = {"content": text, "add_special": False, "with_pieces": True}
        failure = "cannot count tokens"
        tokens = self._json("POST", "/tokenize", body, failure, timeout=IDENTITY_TIMEOUT_S).get("tokens")
        if not isinstance(tokens, list):
            raise PackError(f"{failure}: llama-server at {self.root} sent no token list for /tokenize")
        return tokens

    def _tokenize(self, text: str) -> int:
        failure = "llama-server /tokenize failed"
        body = {"content": text, "add_special": False}
        status, data = self._http.request("POST", "/tokenize", body, failure, timeout=REQUEST_TIMEOUT_S)
        if status != 200:
            raise PackError(f"{failure} at {self.root}: HTTP {status}")
        # {"tokens":[1,2,3]}: counting commas spares decoding a million-token JSON array.
        return 0 if b"[]" in data else data.count(b",") + 1

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


class _Connections:
    """JSON requests over the standard library's http.client, one keep-alive connection per thread (the counter's
    pool): httpx and httpcore would cost a tenth of a second of imports per run, a tenth of a warm pack."""

    def __init__(self, server_url: str) -> None:
        parts = urlsplit(server_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise PackError(f"cannot count tokens: {server_url!r} is not an http(s) URL")
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port
        self.root = f"{parts.scheme}://{parts.netloc}"
        self._local = threading.local()
        self._opened: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _connection(self, fresh: bool) -> http.client.HTTPConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None or fresh:
            if connection is not None:
                connection.close()
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            connection = kind(self._host, self._port)
            self._local.connection = connection
            with self._lock:
                self._opened.append(connection)
        return connection

    def request(
        self, method: str, path: str, body: dict[str, Any] | None, failure: str, *, timeout: float
    ) -> tuple[int, bytes]:
        """(status, body). A kept-alive connection the server has closed meanwhile is opened again, once: the
        requests are reads (counting), safe to repeat."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        for attempt in range(2):
            connection = self._connection(fresh=attempt > 0)
            connection.timeout = timeout  # for a connection opened by this request
            if connection.sock is not None:
                connection.sock.settimeout(timeout)
            try:
                connection.request(method, path, body=data, headers=headers)
                response = connection.getresponse()
                return response.status, response.read()
            except (OSError, http.client.HTTPException) as exc:
                connection.close()
                if attempt or not isinstance(exc, (ConnectionError, http.client.RemoteDisconnected)):
                    reason = f"{exc.__class__.__name__}: {exc}"
                    raise PackError(f"{failure}: llama-server unreachable at {self.root}: {reason}") from exc
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            for connection in self._opened:
                connection.close()
