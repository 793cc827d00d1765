"""Saved prefixes (agent.server.kv_cache, agent.server.kv_store): what is saved, what is restored and where, the
bounded directory, and save/restore on a real llama-server with DeepSeek V4's chat template."""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from agent.dispatch.seats import FleetModel, ServerPool
from agent.protocol.config import LLMConfig, SamplingConfig
from agent.protocol.events import PrefixCacheEvent
from agent.server.api import LlamaServerAPI
from agent.server.binary import find_chat_template
from agent.server.chat import OpenAIChatModel
from agent.server.kv_cache import PrefixCache
from agent.server.kv_store import CacheEntry, KVCacheStore, ReuseSeen, SavedSlot, SlotLayout, packed
from agent.server.launcher import ServerState, _state_file
from agent.server.presets import PresetRequest

from support.llama_fixtures import READ_FILE_TOOLS, TEST_CTX, TEST_THREADS, free_port, running_server
from support.scripted_server import Die, ScriptedServer, ScriptedSlots, common_prefix, rendered_prompt

TOOLS = [{"type": "function", "function": {"name": "finish", "parameters": {"type": "object", "properties": {}}}}]


def _system(paragraphs: int, *, last: str = "") -> str:
    """A repository-like system text, a few hundred tokens per ten paragraphs, deterministic."""
    body = "".join(
        f"## module_{number}.py\ndef function_{number}(value):\n    return value * {number} + {number % 7}\n\n"
        for number in range(paragraphs)
    )
    return f"You refactor code. The repository follows.\n{body}{last}"


def _messages(system: str, question: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


# ---------------------------------------------------------------------------------------------------------------
# The directory


LAYOUT = SlotLayout(slots=1, unified=False)


def _fake_entry(store: KVCacheStore, text: str, size: int, last_used: float, *, identity: str = "a" * 32) -> str:
    saved = SavedSlot.of(identity, LAYOUT, "prefix", "b" * 32, packed([ord(c) for c in text]))
    (store.directory / store.filename(saved.digest)).write_bytes(b"\0" * size)
    entry = store.record(saved)
    store._write(store._meta(saved.digest), entry.model_copy(update={"last_used": last_used}).model_dump_json())
    return saved.digest


def test_eviction_drops_the_least_recently_used_until_under_the_cap(tmp_path):
    store = KVCacheStore(tmp_path, cap_bytes=2500)
    old = _fake_entry(store, _system(10, last="a"), 1000, last_used=1.0)
    used_lately = _fake_entry(store, _system(10, last="b"), 1000, last_used=3.0)
    older = _fake_entry(store, _system(10, last="c"), 1000, last_used=2.0)
    assert store.evict(keep=old) == [older]
    assert {entry.digest for entry in store.entries()} == {old, used_lately}
    assert not (tmp_path / f"{older}.json").exists() and not (tmp_path / f"{older}.bin").exists()


def test_entries_are_kept_per_model_and_slot_layout(tmp_path):
    store = KVCacheStore(tmp_path)
    mine = _fake_entry(store, _system(5), 10, last_used=1.0)
    _fake_entry(store, _system(5), 10, last_used=1.0, identity="c" * 32)
    assert [entry.digest for entry in store.usable("a" * 32, LAYOUT)] == [mine]
    assert store.usable("a" * 32, SlotLayout(slots=2, unified=False)) == []
    assert len(store.entries()) == 2


def test_the_layout_is_the_slot_count_and_the_last_kv_unified_flag():
    assert SlotLayout.of(2, ["llama-server", "--parallel", "2", "--no-kv-unified"]) == SlotLayout(
        slots=2, unified=False
    )
    assert SlotLayout.of(2, ["--no-kv-unified", "-kvu"]).unified
    assert not SlotLayout.of(1, []).unified


def test_entries_ignore_metadata_without_its_file(tmp_path):
    store = KVCacheStore(tmp_path)
    saved = SavedSlot.of("a" * 32, LAYOUT, "prefix", "b" * 32, packed([1, 2, 3]))
    entry = CacheEntry(**saved.model_dump(), bytes=1, sha256="0" * 64, last_used=1.0)
    (tmp_path / f"{saved.digest}.json").write_text(entry.model_dump_json())
    assert store.entries() == []


def _planted(directory: Path, name: str, digest: str) -> None:
    """Metadata a hostile hand wrote into the save directory: a valid entry except for what it names."""
    saved = SavedSlot.of("a" * 32, LAYOUT, "prefix", "b" * 32, packed([1, 2, 3]))
    entry = CacheEntry(**saved.model_dump(), bytes=10**9, sha256="0" * 64, last_used=0.0)
    (directory / name).write_text(entry.model_dump_json().replace(saved.digest, digest))


@pytest.mark.parametrize("digest", ["../victim", "{absolute}"], ids=["relative", "absolute"])
def test_planted_metadata_never_names_a_file_outside_the_directory(tmp_path, digest):
    cache = tmp_path / "cache"
    cache.mkdir()
    victims = [tmp_path / "victim.bin", tmp_path / "victim.json"]
    for victim in victims:
        victim.write_bytes(b"keep me")
    store = KVCacheStore(cache, cap_bytes=0)
    _planted(cache, "planted.json", digest.format(absolute=tmp_path / "victim"))
    kept = _fake_entry(store, _system(10, last="kept"), 100, last_used=1.0)
    assert [entry.digest for entry in store.entries()] == [kept]
    store.evict(keep="none")
    assert all(victim.read_bytes() == b"keep me" for victim in victims)


def test_metadata_under_another_name_or_through_a_link_is_not_an_entry(tmp_path):
    store = KVCacheStore(tmp_path)
    real = _fake_entry(store, _system(10, last="real"), 100, last_used=1.0)
    other = "1" * 32
    (tmp_path / f"{other}.bin").write_bytes(b"\0" * 100)
    # A copy of `real`'s metadata filed under another digest, and a link to it: neither is an entry of its own.
    (tmp_path / f"{other}.json").write_bytes((tmp_path / f"{real}.json").read_bytes())
    linked = "2" * 32
    (tmp_path / f"{linked}.bin").write_bytes(b"\0" * 100)
    (tmp_path / f"{linked}.json").symlink_to(tmp_path / f"{real}.json")
    assert [entry.digest for entry in store.entries()] == [real]


# ---------------------------------------------------------------------------------------------------------------
# A scripted server's slots (one token per character; agent.server.kv_cache sees what llama-server would show)


@contextmanager
def _slot_server(
    save_dir: Path, state_dir: Path, *, slots: int = 1, after_restore: str = "cut", script: list | None = None
) -> Iterator[ScriptedServer]:
    """A scripted server with slots that save to `save_dir`, recorded in `state_dir` as the launcher records the
    servers it starts (so PrefixCache.for_server manages it)."""
    save_dir.mkdir(exist_ok=True)
    state_dir.mkdir(exist_ok=True)
    with ScriptedServer(script, slots=slots, kv=ScriptedSlots(save_dir, after_restore)) as server:
        port = urlsplit(server.root).port
        assert port is not None
        state = ServerState(
            pid=os.getpid(),
            preset="embedded",
            url=server.url,
            port=port,
            binary=Path(sys.executable),
            command=["llama-server", "--parallel", str(slots)],
            log_file=state_dir / "log",
            started_at=datetime.now(UTC),
            drafting=False,
            slot_save_path=save_dir,
        )
        _state_file(state_dir, port).write_text(state.model_dump_json())
        yield server


def _scripted_model(server: ScriptedServer, slot: int = 0) -> OpenAIChatModel:
    return OpenAIChatModel(LLMConfig(server_url=server.url, max_retries=0), slot=slot)


def _cache(server: ScriptedServer, state_dir: Path, events: list[PrefixCacheEvent]) -> PrefixCache:
    cache = PrefixCache.for_server(
        LlamaServerAPI(server.url), settings="max", notify=events.append, state_dir=state_dir
    )
    assert cache is not None
    return cache


def _shared_prefix(system: str) -> int:
    """The characters every task's rendering on `system` shares, from the scripted template itself."""
    renderings = [
        rendered_prompt({"messages": _messages(system, text), "tools": TOOLS, "reasoning_effort": "max"})
        for text in "Ab"
    ]
    return common_prefix(*renderings)


def _conversation(system: str) -> list[dict]:
    """A task's history five messages in: what a resumed task or one moved to another server sends first."""
    return [
        *_messages(system, "Rename function_3."),
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "finish", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "not yet: the tests fail"},
        {"role": "user", "content": "Go on."},
    ]


@pytest.mark.parametrize("how", ["resumed", "moved to another server"])
def test_a_failover_or_resume_never_saves_the_conversation(tmp_path, how):
    """The first request of a seat is not always a task's first: a resumed task's, or one whose server died, holds
    the whole conversation. Only the shared prefix is saved, never that conversation (it was: 6719 tokens saved as
    the repository's prefix for a 3063-token one)."""
    system = _system(20)
    events: list[PrefixCacheEvent] = []
    with _slot_server(tmp_path / "kv", tmp_path / "state") as server:
        cache = _cache(server, tmp_path / "state", events)
        if how == "resumed":
            cache.wrap(_scripted_model(server)).complete(_conversation(system), TOOLS)
        else:
            config = LLMConfig(max_retries=0, retry_backoff_s=0.0)
            with ScriptedServer([Die()]) as dying:
                pool = ServerPool([dying.url, server.url])
                model = FleetModel(pool, config, emit=events.append, caches={(server.url, 0): cache})
                model.complete(_conversation(system), TOOLS)
                assert model.server == server.url
    saved = [event for event in events if isinstance(event, PrefixCacheEvent) and event.action == "saved"]
    assert [event.tokens for event in saved] == [_shared_prefix(system)], events
    (entry,) = KVCacheStore(tmp_path / "kv").entries()
    assert entry.n_tokens == _shared_prefix(system) < len(rendered_prompt(server.requests[-1]))


def test_a_file_saved_with_another_slot_layout_is_skipped_never_deleted(tmp_path):
    """llama-server refuses a file saved with another --parallel (HTTP 400, "n_stream mismatch"), and the file was
    then forgotten as if corrupt: the server that saved it lost it."""
    system = _system(20)
    events: list[PrefixCacheEvent] = []
    with _slot_server(tmp_path / "kv", tmp_path / "state", slots=2) as two:
        _cache(two, tmp_path / "state", events).wrap(_scripted_model(two)).complete(_messages(system, "One?"), TOOLS)
    (saved_by_two,) = KVCacheStore(tmp_path / "kv").entries()
    events.clear()
    with _slot_server(tmp_path / "kv", tmp_path / "state", slots=1) as one:
        _cache(one, tmp_path / "state", events).wrap(_scripted_model(one)).complete(_messages(system, "Two?"), TOOLS)
        assert ("restore", 0) not in one.kv.actions
    assert [event.action for event in events] == ["saved"], events
    assert (tmp_path / "kv" / f"{saved_by_two.digest}.bin").exists()
    assert len(KVCacheStore(tmp_path / "kv").entries()) == 2, "one file per layout"


def test_a_file_the_prompt_does_not_extend_is_never_restored_where_restores_cannot_be_cut(tmp_path):
    """DeepSeek V4's cache cannot be cut back: a restored file the prompt leaves partway gives nothing (and a restore
    clears the checkpoints). Seen once, such files are never restored on that server again."""
    events: list[PrefixCacheEvent] = []
    nights = [_system(100, last=f"# edited on night {night}\n") for night in range(3)]
    with _slot_server(tmp_path / "kv", tmp_path / "state", after_restore="extension") as server:
        replies = []
        for system in nights:
            cache = _cache(server, tmp_path / "state", events)  # a new run each night: the slot holds nothing known
            replies.append(cache.wrap(_scripted_model(server)).complete(_messages(system, "Which?"), TOOLS))
        restores = [action for action in server.kv.actions if action[0] == "restore"]
    assert len(restores) == 1, "tried once, on the second night, into a slot holding nothing known"
    assert [event.action for event in events] == ["saved", "restored", "saved", "saved"], events
    assert replies[2].stats.cached_tokens >= _shared_prefix(nights[2])
    assert KVCacheStore(tmp_path / "kv").reuse(cache.identity).partial is False


def test_a_server_where_restores_give_nothing_warns_once_and_is_not_restored_into_again(tmp_path):
    events: list[PrefixCacheEvent] = []
    system = _system(20)
    with _slot_server(tmp_path / "kv", tmp_path / "state", after_restore="nothing") as server:
        for question in ("One?", "Two?", "Three?"):
            server.kv.held.clear()  # another client took the slot between the tasks
            _cache(server, tmp_path / "state", events).wrap(_scripted_model(server)).complete(
                _messages(system, question), TOOLS
            )
        restores = [action for action in server.kv.actions if action[0] == "restore"]
    assert len(restores) == 1
    warnings = [event.message for event in events if event.action == "warning"]
    assert len(warnings) == 2, warnings
    assert "gave this server nothing" in warnings[0] and "not restored on this server" in warnings[1]


def test_a_task_extending_what_the_slot_holds_restores_nothing_and_a_resumed_one_restores_its_prefix(tmp_path):
    events: list[PrefixCacheEvent] = []
    system = _system(20)
    with _slot_server(tmp_path / "kv", tmp_path / "state", after_restore="extension") as server:
        cache = _cache(server, tmp_path / "state", events)
        cache.wrap(_scripted_model(server)).complete(_messages(system, "One?"), TOOLS)
        second = cache.wrap(_scripted_model(server)).complete(_messages(system, "Two?"), TOOLS)
        assert [event.action for event in events] == ["saved"]
        assert second.stats.cached_tokens >= _shared_prefix(system)
        server.kv.held.clear()
        events.clear()
        resumed = _cache(server, tmp_path / "state", events).wrap(_scripted_model(server))
        reply = resumed.complete(_conversation(system), TOOLS)
    assert [event.action for event in events] == ["restored"], events
    assert events[0].tokens == _shared_prefix(system) == reply.stats.cached_tokens


# ---------------------------------------------------------------------------------------------------------------
# A real llama-server (SmolLM2-135M on CPU, DeepSeek V4 Flash 0731's chat template): the slot really is saved, a
# restore really skips the prefill, and the files hold the shared prefix the template gives, nothing more.


def _two_slots(save_dir: Path) -> PresetRequest:
    extra = [*TEST_THREADS, "--chat-template-file", str(find_chat_template())]
    return PresetRequest(ctx_size=TEST_CTX, port=free_port(), parallel=2, extra_args=extra, slot_save_path=save_dir)


@pytest.fixture(scope="module")
def two_slot_server(tmp_path_factory, llama_binary, llama_state_dir):
    """`--parallel 2` with V4's template, saving into a directory of its own."""
    save_dir = tmp_path_factory.mktemp("kv-two-slots")
    with running_server(_two_slots(save_dir), llama_binary, llama_state_dir) as state:
        yield state, save_dir


def _model(url: str, slot: int | None = None, max_tokens: int = 2) -> OpenAIChatModel:
    sampling = SamplingConfig(max_tokens=max_tokens, seed=1, temperature=0.0)
    return OpenAIChatModel(LLMConfig(server_url=url, sampling=sampling, max_retries=0), slot=slot)


def _server_cache(url: str, state_dir: Path, events: list[PrefixCacheEvent]) -> PrefixCache:
    cache = PrefixCache.for_server(LlamaServerAPI(url), settings="max", notify=events.append, state_dir=state_dir)
    assert cache is not None
    return cache


def _actions(events: list[PrefixCacheEvent]) -> list[str]:
    return [event.action for event in events]


@pytest.mark.llama_server
def test_the_saved_prefix_is_exactly_the_shared_prefix_and_reused_in_another_slot_and_after_a_restart(
    two_slot_server, llama_binary, llama_state_dir
):
    """The file holds the tokens every task's first request on the commit starts with, as the template renders
    them, and nothing of the first task (it held the first reply too: 3,202 tokens saved for a 3,063-token
    prefix). Restored into another slot, or after a restart, the next task's first request reuses all of it."""
    state, save_dir = two_slot_server
    system = _system(30)
    events: list[PrefixCacheEvent] = []
    cache = _server_cache(state.url, llama_state_dir, events)
    prefix = cache.rendering.shared_prefix(system, READ_FILE_TOOLS)
    first = cache.wrap(_model(state.url, slot=0, max_tokens=16)).complete(
        _messages(system, "Which module is first?"), READ_FILE_TOOLS
    )
    assert _actions(events) == ["saved"] and events[0].tokens == len(prefix), events
    (entry,) = [entry for entry in KVCacheStore(save_dir).entries() if entry.digest in events[0].message]
    assert entry.n_tokens == len(prefix) < first.stats.prompt_tokens
    # Tasks share the prefix, and some part ways right after it: SmolLM2 joins the marker's `>` with some first
    # characters (`.`, `<`, quotes), so the prefix ends before it.
    starts = ("Xy", "(z", '"quoted" first', ".z")
    tokens = [cache.rendering.prompt_tokens(_messages(system, task), READ_FILE_TOOLS) for task in starts]
    assert all(task[: len(prefix)] == prefix for task in tokens)
    assert len({task[len(prefix)] for task in tokens}) > 1

    events.clear()
    other = cache.for_slot(1).wrap(_model(state.url, slot=1))
    in_slot_1 = other.complete(_messages(system, "Which module is last?"), READ_FILE_TOOLS)
    assert _actions(events) == ["restored"] and events[0].tokens == len(prefix), events
    assert in_slot_1.stats.cached_tokens == len(prefix)
    events.clear()
    # Another server process on the same files: nothing resident, as after a restart.
    with running_server(_two_slots(save_dir), llama_binary, llama_state_dir) as restarted:
        after_restart = _server_cache(restarted.url, llama_state_dir, events).wrap(_model(restarted.url, slot=0))
        reply = after_restart.complete(_messages(system, "How many modules?"), READ_FILE_TOOLS)
    assert _actions(events) == ["restored"] and events[0].tokens == len(prefix), events
    assert reply.stats.cached_tokens == len(prefix)
    assert KVCacheStore(save_dir).reuse(after_restart.cache.identity).exact is True


def _tiers(newest: str) -> tuple[str, list[int]]:
    """A churn-ordered system message of three tiers (stablest first) and the offsets where the first two end."""
    tiers = [
        "".join(f"def stable_{n}(x):\n    return x + {n}\n\n" for n in range(18)),
        "".join(f"def settled_{n}(x):\n    return x * {n}\n\n" for n in range(12)),
        newest,
    ]
    head = "You refactor code. The repository follows.\n"
    return head + "".join(tiers), [len(head) + len(tiers[0]), len(head) + len(tiers[0]) + len(tiers[1])]


@pytest.fixture
def kv_server(llama_server_v4, llama_state_dir):
    """The session's V4-template server and its save directory, as a server not seen restoring yet."""
    cache = _server_cache(llama_server_v4.url, llama_state_dir, [])
    cache.store.remember_reuse(cache.identity, ReuseSeen())
    return llama_server_v4, cache.store.directory


@pytest.mark.llama_server
def test_a_boundary_file_lets_a_later_commit_reuse_its_unchanged_tiers(kv_server, llama_state_dir):
    state, save_dir = kv_server
    events: list[PrefixCacheEvent] = []
    night_1, boundaries = _tiers("def hot(x):\n    return x - 1\n")
    _server_cache(state.url, llama_state_dir, events).wrap(_model(state.url), boundaries).complete(
        _messages(night_1, "Rename hot."), READ_FILE_TOOLS
    )
    assert _actions(events) == ["saved", "saved", "saved"], events
    saved = {event.tokens: event for event in events}
    assert "tier of the pack" in events[0].message and "prefix tokens" in events[2].message
    store = KVCacheStore(save_dir)
    files = {entry.n_tokens: entry for entry in store.entries() if entry.n_tokens in saved}
    per_token = [entry.bytes / entry.n_tokens for entry in files.values()]
    assert max(per_token) < 1.02 * min(per_token), "each file is its own tokens' size"

    events.clear()
    night_2, _ = _tiers("def hot(x, y):\n    return x - y\n")  # the next commit changed only the newest file
    cache = _server_cache(state.url, llama_state_dir, events)
    reply = cache.wrap(_model(state.url), boundaries).complete(_messages(night_2, "Rename hot."), READ_FILE_TOOLS)
    longest_unchanged = sorted(saved)[1]
    assert _actions(events) == ["restored", "saved"], events
    assert events[0].tokens == longest_unchanged and "the prompt extends" in events[0].message
    assert store.reuse(cache.identity).exact is True, "the prefill after the restore reused all it restored"
    assert reply.stats.cached_tokens == events[1].tokens


@pytest.mark.llama_server
def test_partial_reuse_is_kept_where_the_server_shows_it(kv_server, llama_state_dir):
    """SmolLM2's cache can be cut back: a restored file the prompt leaves near its end gives all it shares, which
    is seen and remembered, so such files keep being restored there."""
    state, save_dir = kv_server
    base = _system(15, last="# the tail\n")
    events: list[PrefixCacheEvent] = []
    _server_cache(state.url, llama_state_dir, events).wrap(_model(state.url)).complete(
        _messages(base, "Which?"), READ_FILE_TOOLS
    )
    replies = []
    for night in (1, 2):
        edited = base.replace("# the tail", f"# a tail edited on night {night}")
        events.clear()
        cache = _server_cache(state.url, llama_state_dir, events)
        replies.append(cache.wrap(_model(state.url)).complete(_messages(edited, "Which?"), READ_FILE_TOOLS))
        assert _actions(events) == ["restored", "saved"], events
        assert "sharing" in events[0].message
    assert KVCacheStore(save_dir).reuse(cache.identity).partial is True
    # All but the edited end is reused: far more than nothing, less than the whole prefix.
    assert events[1].tokens - 30 < replies[1].stats.cached_tokens < replies[1].stats.prompt_tokens


@pytest.mark.llama_server
@pytest.mark.parametrize("damage", ["truncated", "flipped", "foreign"])
def test_a_corrupt_or_foreign_saved_prefix_falls_back_to_prefilling_with_one_warning(
    kv_server, llama_state_dir, damage
):
    """Truncated or changed files are caught before the server reads them (a truncated one would abort it); a file
    the server itself refuses (written by something else, its metadata intact) is the server's refusal."""
    state, save_dir = kv_server
    system = f"A {damage} night.\n" + _system(12)  # shares no more than the template head with the others
    events: list[PrefixCacheEvent] = []
    _server_cache(state.url, llama_state_dir, events).wrap(_model(state.url)).complete(_messages(system, "First?"), [])
    store = KVCacheStore(save_dir)
    (saved_event,) = events
    (entry,) = [entry for entry in store.entries() if entry.digest in saved_event.message]
    saved = save_dir / store.filename(entry.digest)
    data = bytearray(saved.read_bytes())
    if damage == "truncated":
        saved.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":
        data[len(data) // 2] ^= 0xFF
        saved.write_bytes(data)
    else:
        saved.write_bytes(os.urandom(len(data)))
        store.record(entry)  # metadata that vouches for the foreign file

    events.clear()
    _model(state.url).complete(_messages("Another repository entirely.", "Hi"), [])  # the slot holds other content
    cache = _server_cache(state.url, llama_state_dir, events)
    reply = cache.wrap(_model(state.url)).complete(_messages(system, "Second?"), [])
    warnings = [event for event in events if event.action == "warning"]
    assert len(warnings) == 1 and saved.name in warnings[0].message, events
    assert reply.stats.completion_tokens > 0
    # The bad file is gone (it would fail again) and the prefix, prefilled anew, is saved again.
    assert _actions(events) == ["warning", "saved"]
    assert KVCacheStore(save_dir).has(saved.stem)


@pytest.mark.llama_server
def test_a_restore_over_other_content_keeps_a_speculative_server_decoding(llama_server, llama_state_dir):
    """Restoring over another prompt left the drafter's cache behind: every later request failed with HTTP 500
    ("failed to process speculative batch") until the slot was cleared. The slot is now emptied first."""
    system = "A speculative night.\n" + _system(20)
    events: list[PrefixCacheEvent] = []
    model = _model(llama_server.url)
    _server_cache(llama_server.url, llama_state_dir, events).wrap(model).complete(_messages(system, "First?"), [])
    model.complete(_messages("Another repository entirely.", "Hi"), [])  # the slot now holds other content
    later = _server_cache(llama_server.url, llama_state_dir, events)
    reply = later.wrap(model).complete(_messages(system, "Second?"), [])
    assert _actions(events) == ["saved", "restored"], events
    assert reply.stats.completion_tokens > 0 and reply.stats.prompt_tokens - reply.stats.cached_tokens < 30


@pytest.mark.llama_server
def test_two_slots_prefill_a_shared_prefix_once_and_the_other_slot_restores_it(two_slot_server, llama_state_dir):
    """`run --parallel 2`, two tasks on one commit: the first prefills the prefix alone and saves it, the second
    waits for that file and restores it into its own slot instead of prefilling the same tokens alongside, while
    the first task's reply is still being decoded."""
    system = "Two tasks, one commit.\n" + _system(30)
    state, _ = two_slot_server
    api = LlamaServerAPI(state.url, timeout_s=120.0)
    assert int(api.props()["total_slots"]) == 2
    server = _server_cache(state.url, llama_state_dir, [])
    events: dict[int, list[PrefixCacheEvent]] = {0: [], 1: []}
    replies: dict[int, object] = {}
    restored_at: list[float] = []
    answered_at: dict[int, float] = {}

    def notify(slot: int, event: PrefixCacheEvent) -> None:
        events[slot].append(event)
        if event.action == "restored":
            restored_at.append(time.monotonic())

    def task(slot: int) -> None:
        cache = server.for_slot(slot)
        cache.notify = functools.partial(notify, slot)
        # Slot 0's reply is long, so that its decoding outlasts slot 1's wait.
        model = _model(state.url, slot=slot, max_tokens=64 if slot == 0 else 2)
        question = "Tell a long story about every module." if slot == 0 else "Task 1?"
        replies[slot] = cache.wrap(model).complete(_messages(system, question), [])
        answered_at[slot] = time.monotonic()

    first = threading.Thread(target=task, args=(0,))
    first.start()
    deadline = time.monotonic() + 120
    while not api.slots()[0].get("is_processing"):
        assert time.monotonic() < deadline and first.is_alive(), "slot 0 never started its prefill"
        time.sleep(0.02)
    second = threading.Thread(target=task, args=(1,))
    second.start()
    first.join(300)
    second.join(300)
    assert _actions(events[0]) == ["saved"]
    assert _actions(events[1]) == ["waiting", "restored"], events[1]
    assert "slot 0 is prefilling the same prefix" in events[1][0].message
    assert restored_at[0] < answered_at[0], "slot 1 restored while slot 0's reply was still decoding"
    assert replies[0].stats.completion_tokens > 10
    assert replies[0].stats.prompt_tokens - replies[0].stats.cached_tokens < 30, "its own prefill came first"
    assert replies[1].stats.prompt_tokens - replies[1].stats.cached_tokens < 30, replies[1].stats
    # Slot 1 really holds the prefix (the request was pinned there, not served by slot 0 again).
    probe = api.slot_action(1, "save", "probe.bin")
    assert int(probe["n_saved"]) >= replies[1].stats.prompt_tokens
