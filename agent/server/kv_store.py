"""The save directory of llama-server's slots: the files it writes, the metadata we keep beside them, eviction.

`<digest>.bin` is a slot saved by llama-server (`POST /slots/N?action=save`); `<digest>.json` beside it says what
it holds: the exact token list (int32, base64: the server's own file layout is internal), the model and server
binary that wrote it (`identity`), the slot layout of the server (a file saved with `--parallel 2` does not load
on a server with `--parallel 1`: "n_stream mismatch", HTTP 400), its size, SHA-256 and last use.
`reuse-<identity>.json` remembers what restores were seen to give on servers of that identity. Files are opened
without following links and only as regular files: a link planted here never leads a read or a deletion
elsewhere, and only lower-case hex digests of the right length name files.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import stat
import struct
import time
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, StringConstraints

from agent.protocol.config import DEFAULT_PREFIX_CACHE_BYTES

DIGEST_HEX = 32
DIGEST_PATTERN = rf"[0-9a-f]{{{DIGEST_HEX}}}"
Digest = Annotated[str, StringConstraints(pattern=f"^{DIGEST_PATTERN}$")]
_METADATA_NAME = re.compile(rf"({DIGEST_PATTERN})\.json")
# A token list takes about 5.3 bytes of metadata per token: this is a prefix of millions of tokens.
MAX_METADATA_BYTES = 32 * 2**20
TOKEN_BYTES = 4  # int32, little-endian


def digest_of(*parts: str | bytes) -> str:
    running = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else part.encode(errors="surrogatepass")
        running.update(len(data).to_bytes(8, "little"))  # no two part lists hash alike by shifting a boundary
        running.update(data)
    return running.hexdigest()[:DIGEST_HEX]


def packed(tokens: list[int]) -> bytes:
    """Tokens as int32 little-endian bytes: a prefix of tokens is a prefix of bytes, compared in C."""
    return struct.pack(f"<{len(tokens)}i", *tokens)


def unpacked(data: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(data) // TOKEN_BYTES}i", data))


class SlotLayout(BaseModel):
    """What a saved slot's file depends on besides the model: the server's slot count and whether their KV cache is
    one unified buffer (llama.cpp's state files record the KV streams and refuse another count)."""

    model_config = ConfigDict(frozen=True)

    slots: int
    unified: bool

    @classmethod
    def of(cls, total_slots: int, command: list[str]) -> SlotLayout:
        """From /props `total_slots` and the server's command line (the last `--[no-]kv-unified` counts; without
        one, llama-server b11434 unifies only when it picks the slot count itself, which the launcher never lets
        it)."""
        unified = False
        for argument in command:
            if argument in ("-kvu", "--kv-unified"):
                unified = True
            elif argument in ("-no-kvu", "--no-kv-unified"):
                unified = False
        return cls(slots=total_slots, unified=unified)


class SavedSlot(BaseModel):
    """What a saved slot holds and who can load it."""

    digest: Digest
    identity: Digest  # the model file and server binary that wrote it
    layout: SlotLayout
    kind: Literal["prefix", "boundary"]  # the shared prefix of a system message, or a tier boundary inside it
    source: Digest  # the system message, tools and effort it was made for
    tokens: str  # base64 of the packed token list
    n_tokens: int

    @classmethod
    def of(
        cls, identity: str, layout: SlotLayout, kind: Literal["prefix", "boundary"], source: str, tokens: bytes
    ) -> SavedSlot:
        return cls(
            digest=slot_digest(identity, layout, tokens),
            identity=identity,
            layout=layout,
            kind=kind,
            source=source,
            tokens=base64.b64encode(tokens).decode(),
            n_tokens=len(tokens) // TOKEN_BYTES,
        )

    def token_bytes(self) -> bytes:
        return base64.b64decode(self.tokens)


def slot_digest(identity: str, layout: SlotLayout, tokens: bytes) -> str:
    """The name of the file holding `tokens` saved on servers of this identity and layout."""
    return digest_of(identity, layout.model_dump_json(), tokens)


class CacheEntry(SavedSlot):
    bytes: int
    sha256: str  # of the .bin: llama-server aborts (GGML_ASSERT) on a truncated file instead of refusing it
    last_used: float


class ReuseSeen(BaseModel):
    """What restores were seen to give on a server of one identity; None until seen. `exact`: a prompt that
    exactly extends a restored file reuses all of it. `partial`: a prompt that leaves a restored file partway
    reuses the part it shares (a cache that can be cut back; DeepSeek V4's cannot, and a restore clears the
    context checkpoints it would need)."""

    exact: bool | None = None
    partial: bool | None = None


class KVCacheStore:
    def __init__(self, directory: Path, *, cap_bytes: int = DEFAULT_PREFIX_CACHE_BYTES) -> None:
        self.directory = directory
        self.cap_bytes = cap_bytes

    @staticmethod
    def filename(digest: str, suffix: str = ".bin") -> str:
        """The file of a digest, relative to the directory (llama-server takes it so)."""
        if not re.fullmatch(DIGEST_PATTERN, digest):
            raise ValueError(f"not a prefix digest: {digest!r}")
        return f"{digest}{suffix}"

    def _meta(self, digest: str) -> Path:
        return self.directory / self.filename(digest, ".json")

    def _bin(self, digest: str) -> Path:
        return self.directory / self.filename(digest)

    def entries(self) -> list[CacheEntry]:
        """Every entry with its file; metadata of earlier versions (no token list) is not one."""
        entries = []
        for name in sorted(os.listdir(self.directory)):
            named = _METADATA_NAME.fullmatch(name)
            if named is None:
                continue
            try:
                entry = CacheEntry.model_validate_json(_read_regular(self.directory / name, MAX_METADATA_BYTES))
            except (OSError, ValueError):
                continue
            # Metadata filed under another digest than its own would make eviction delete that other prefix.
            if entry.digest == named.group(1) and _regular_size(self._bin(entry.digest)) is not None:
                entries.append(entry)
        return entries

    def usable(self, identity: str, layout: SlotLayout) -> list[CacheEntry]:
        """The entries a server of this identity and layout can load. Others stay: their server may come back."""
        return [entry for entry in self.entries() if entry.identity == identity and entry.layout == layout]

    def has(self, digest: str) -> bool:
        return _regular_size(self._meta(digest)) is not None and _regular_size(self._bin(digest)) is not None

    def record(self, saved: SavedSlot) -> CacheEntry:
        """Files the .bin llama-server just wrote under `saved`'s digest (its size and SHA-256 read from it)."""
        path = self._bin(saved.digest)
        size = _regular_size(path)
        if size is None:
            raise OSError(f"{path} is not the regular file llama-server saves")
        held = saved.model_dump(include=set(SavedSlot.model_fields))  # an entry recorded again is measured again
        entry = CacheEntry(**held, bytes=size, sha256=_file_sha256(path), last_used=time.time())
        self._write(self._meta(entry.digest), entry.model_dump_json())
        return entry

    def intact(self, entry: CacheEntry) -> bool:
        """The file is the one saved: a damaged one must never reach the server, which would die reading it."""
        path = self._bin(entry.digest)
        try:
            return _regular_size(path) == entry.bytes and _file_sha256(path) == entry.sha256
        except OSError:
            return False

    def touch(self, entry: CacheEntry) -> None:
        self._write(self._meta(entry.digest), entry.model_copy(update={"last_used": time.time()}).model_dump_json())

    def forget(self, digest: str) -> None:
        # unlink removes a link itself, never its target; the names are the digest's own, inside the directory.
        self._meta(digest).unlink(missing_ok=True)
        self._bin(digest).unlink(missing_ok=True)

    def evict(self, keep: str) -> list[str]:
        """Least recently used first until the saved files fit the cap; `keep` (the one just saved) stays."""
        return [entry.digest for entry in self.evict_to(self.cap_bytes, keep=keep)]

    def evict_to(self, cap_bytes: int, *, keep: str | None = None, dry_run: bool = False) -> list[CacheEntry]:
        """Least recently used first until the saved files fit `cap_bytes` (`keep` stays); with dry_run only which
        ones would go. Only entries whose metadata and file are both ours (entries()) are ever deleted."""
        entries = sorted(self.entries(), key=lambda entry: entry.last_used)
        total = sum(entry.bytes for entry in entries)
        evicted = []
        for entry in entries:
            if total <= cap_bytes:
                break
            if entry.digest == keep:
                continue
            if not dry_run:
                self.forget(entry.digest)
            total -= entry.bytes
            evicted.append(entry)
        return evicted

    def reuse(self, identity: str) -> ReuseSeen:
        path = self.directory / f"reuse-{self.filename(identity, '.json')}"
        try:
            return ReuseSeen.model_validate_json(_read_regular(path, MAX_METADATA_BYTES))
        except (OSError, ValueError):
            return ReuseSeen()

    def remember_reuse(self, identity: str, seen: ReuseSeen) -> None:
        self._write(self.directory / f"reuse-{self.filename(identity, '.json')}", seen.model_dump_json())

    def _write(self, path: Path, text: str) -> None:
        partial = path.with_suffix(".json.tmp")
        partial.unlink(missing_ok=True)  # a link planted under this name is replaced, never written through
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
        partial.replace(path)


def _regular_size(path: Path) -> int | None:
    """The size of a regular file that is not a link; None for anything else or nothing."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def _read_regular(path: Path, limit: int) -> bytes:
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(descriptor, "rb") as file:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            raise OSError(f"{path} is not a regular file of at most {limit} bytes")
        return file.read(limit)


def _file_sha256(path: Path) -> str:
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(descriptor, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()
