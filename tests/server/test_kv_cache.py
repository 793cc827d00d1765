"""Saved prefixes (agent.server.kv_cache): keys, the bounded directory, and save/restore on a real llama-server."""

from __future__ import annotations

import functools
import os
import threading
import time
from pathlib import Path

import pytest

from agent.protocol.config import LLMConfig, SamplingConfig
from agent.protocol.events import PrefixCacheEvent
from agent.server.api import LlamaServerAPI
from agent.server.chat import OpenAIChatModel
from agent.server.kv_cache import CacheEntry, KVCacheStore, PrefixCache, PrefixKey
from agent.server.presets import PresetRequest

from support.llama_fixtures import TEST_CTX, free_port, running_server

CHUNK = 256


def _system(paragraphs: int, *, last: str = "") -> str:
    """A repository-like system text, a few hundred tokens per ten paragraphs, deterministic."""
    body = "".join(
        f"## module_{number}.py\ndef function_{number}(value):\n    return value * {number} + {number % 7}\n\n"
        for number in range(paragraphs)
    )
    return f"You refactor code. The repository follows.\n{body}{last}"


def _key(system: str, *, model: str = "m", tools: list | None = None, chunk: int = CHUNK) -> PrefixKey:
    return PrefixKey.of(model, system, tools or [], "max", chunk)


def test_an_edit_near_the_end_keeps_every_head_before_it():
    base = _system(60)
    edited = base[:-10] + "EDITED" + base[-4:]
    original, changed = _key(base), _key(edited)
    assert original.digest != changed.digest
    assert len(original.heads) == len(base) // CHUNK
    # Only the chunk holding the edit (and the tail after it) differs.
    assert changed.shared_with(original) == (len(base) - 10) // CHUNK
    assert original.shared_with(_key(base)) == len(original.heads) + 1


@pytest.mark.parametrize("other", [{"model": "another.gguf"}, {"tools": [{"type": "function"}]}])
def test_another_model_or_tool_list_shares_nothing(other):
    system = _system(60)
    assert _key(system).shared_with(_key(system, **other)) == 0


def _fake_entry(store: KVCacheStore, text: str, size: int, last_used: float) -> PrefixKey:
    key = _key(text)
    (store.directory / store.filename(key.digest)).write_bytes(b"\0" * size)
    entry = store.record(key, tokens=size // 10)
    store._write(entry.model_copy(update={"last_used": last_used}))
    return key


def test_eviction_drops_the_least_recently_used_until_under_the_cap(tmp_path):
    store = KVCacheStore(tmp_path, cap_bytes=2500)
    old = _fake_entry(store, _system(10, last="a"), 1000, last_used=1.0)
    used_lately = _fake_entry(store, _system(10, last="b"), 1000, last_used=3.0)
    older = _fake_entry(store, _system(10, last="c"), 1000, last_used=2.0)
    assert store.evict(keep=old.digest) == [older.digest]
    assert {entry.key.digest for entry in store.entries()} == {old.digest, used_lately.digest}
    assert not (tmp_path / f"{older.digest}.json").exists() and not (tmp_path / f"{older.digest}.bin").exists()


def test_best_prefers_the_exact_prefix_then_the_longest_head(tmp_path):
    store = KVCacheStore(tmp_path)
    base = _system(60)
    short_head = _fake_entry(store, base[: len(base) // 2] + "x" * 1000, 10, last_used=5.0)
    long_head = _fake_entry(store, base[:-300] + "y" * 300, 10, last_used=1.0)
    found = store.best(_key(base))
    assert found is not None and found[0].key.digest == long_head.digest
    exact = _fake_entry(store, base, 10, last_used=0.0)
    found = store.best(_key(base))
    assert found is not None and found[0].key.digest == exact.digest
    assert short_head.digest in {entry.key.digest for entry in store.entries()}


# ---------------------------------------------------------------------------------------------------------------
# A real llama-server (SmolLM2-135M on CPU): the slot really is saved, and a restore really skips the prefill.


def _request(save_dir: Path) -> PresetRequest:
    return PresetRequest(ctx_size=TEST_CTX, port=free_port(), extra_args=["--threads", "1"], slot_save_path=save_dir)


def _model(url: str) -> OpenAIChatModel:
    config = LLMConfig(server_url=url, sampling=SamplingConfig(max_tokens=2, seed=1, temperature=0.0), max_retries=0)
    return OpenAIChatModel(config)


def _messages(system: str, question: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def _cache(url: str, save_dir: Path, events: list[PrefixCacheEvent]) -> PrefixCache:
    api = LlamaServerAPI(url, timeout_s=120.0)
    return PrefixCache(
        api, KVCacheStore(save_dir), model="smollm2", settings="max", notify=events.append, chunk_chars=CHUNK
    )


@pytest.mark.llama_server
def test_a_saved_prefix_is_restored_after_a_server_restart(tmp_path, llama_binary, llama_state_dir):
    save_dir = tmp_path / "kv"
    system = _system(40)
    events: list[PrefixCacheEvent] = []
    with running_server(_request(save_dir), llama_binary, llama_state_dir) as first:
        with LlamaServerAPI(first.url, timeout_s=120.0) as api:
            cache = PrefixCache.for_server(api, settings="max", notify=events.append, state_dir=llama_state_dir)
            assert cache is not None and cache.store.directory == save_dir
            cold = cache.wrap(_model(first.url)).complete(_messages(system, "Which module is first?"), [])
    assert [event.action for event in events] == ["saved"]
    assert cold.stats.cached_tokens == 0 and cold.stats.prompt_tokens > 400
    (entry,) = KVCacheStore(save_dir).entries()
    assert entry.tokens >= cold.stats.prompt_tokens and entry.bytes > 0

    events.clear()
    with running_server(_request(save_dir), llama_binary, llama_state_dir) as second:
        with LlamaServerAPI(second.url, timeout_s=120.0) as api:
            cache = PrefixCache.for_server(api, settings="max", notify=events.append, state_dir=llama_state_dir)
            assert cache is not None
            warm = cache.wrap(_model(second.url)).complete(_messages(system, "Which module is last?"), [])
    assert [event.action for event in events] == ["restored"], events
    # Only the new question (and the template's few tokens around it) is prefilled.
    assert warm.stats.prompt_tokens - warm.stats.cached_tokens < 30, warm.stats
    assert warm.stats.cached_tokens > 400


@pytest.fixture(scope="module")
def kv_server(tmp_path_factory, llama_binary, llama_state_dir):
    save_dir = tmp_path_factory.mktemp("kv")
    with running_server(_request(save_dir), llama_binary, llama_state_dir) as state:
        yield state, save_dir


@pytest.mark.llama_server
@pytest.mark.parametrize("damage", ["truncated", "flipped", "foreign"])
def test_a_corrupt_or_foreign_saved_prefix_falls_back_to_prefilling_with_one_warning(kv_server, damage):
    """Truncated or changed files are caught before the server reads them (a truncated one would abort it); a file
    the server itself refuses (written by something else, its metadata intact) is the server's refusal."""
    state, save_dir = kv_server
    system = _system(30, last=damage)
    events: list[PrefixCacheEvent] = []
    _cache(state.url, save_dir, events).wrap(_model(state.url)).complete(_messages(system, "First?"), [])
    store = KVCacheStore(save_dir)
    (entry,) = [entry for entry in store.entries() if entry.key.digest == _key(system, model="smollm2").digest]
    saved = save_dir / store.filename(entry.key.digest)
    data = bytearray(saved.read_bytes())
    if damage == "truncated":
        saved.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":
        data[len(data) // 2] ^= 0xFF
        saved.write_bytes(data)
    else:
        saved.write_bytes(os.urandom(len(data)))
        store.record(entry.key, entry.tokens)  # metadata that vouches for the foreign file

    events.clear()
    reply = _cache(state.url, save_dir, events).wrap(_model(state.url)).complete(_messages(system, "Second?"), [])
    warnings = [event for event in events if event.action == "warning"]
    assert len(warnings) == 1 and saved.name in warnings[0].message, events
    assert reply.stats.cached_tokens == 0 and reply.stats.completion_tokens > 0
    # The bad file is gone (it would fail again) and the prefix, prefilled anew, is saved again.
    assert [event.action for event in events] == ["warning", "saved"]
    assert KVCacheStore(save_dir).has(saved.stem)


@pytest.mark.llama_server
def test_a_prefix_edited_near_its_end_restores_the_common_head(kv_server):
    state, save_dir = kv_server
    system = _system(40, last="# the tail\n")
    events: list[PrefixCacheEvent] = []
    first = _cache(state.url, save_dir, events).wrap(_model(state.url)).complete(_messages(system, "Which?"), [])
    edited = system.replace("# the tail", "# a tail edited last night")
    events.clear()
    second = _cache(state.url, save_dir, events).wrap(_model(state.url)).complete(_messages(edited, "Which?"), [])
    assert [event.action for event in events] == ["restored", "saved"], events
    assert "sharing" in events[0].message
    # All but the edited end is reused: far more than nothing, less than the whole prefix.
    assert first.stats.prompt_tokens - 60 < second.stats.cached_tokens < second.stats.prompt_tokens


@pytest.mark.llama_server
def test_a_task_on_the_same_prefix_as_the_last_restores_nothing(kv_server):
    state, save_dir = kv_server
    system = "Another repository.\n" + _system(20)  # shares no head with the other tests' prefixes
    events: list[PrefixCacheEvent] = []
    cache = _cache(state.url, save_dir, events)
    cache.wrap(_model(state.url)).complete(_messages(system, "One?"), [])
    second = cache.wrap(_model(state.url)).complete(_messages(system, "Two?"), [])
    assert [event.action for event in events] == ["saved"]
    assert second.stats.prompt_tokens - second.stats.cached_tokens < 30


def test_entries_ignore_metadata_without_its_file(tmp_path):
    store = KVCacheStore(tmp_path)
    key = _key(_system(5))
    entry = CacheEntry(key=key, tokens=1, bytes=1, sha256="0" * 64, last_used=1.0)
    (tmp_path / f"{key.digest}.json").write_text(entry.model_dump_json())
    assert store.entries() == [] and store.best(key) is None


def _planted(directory: Path, name: str, digest: str) -> None:
    """Metadata a hostile hand wrote into the save directory: a valid entry except for what it names."""
    key = _key(_system(5)).model_copy(update={"digest": digest})
    entry = CacheEntry(key=key, tokens=1, bytes=10**9, sha256="0" * 64, last_used=0.0)
    (directory / name).write_text(entry.model_dump_json())


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
    assert [entry.key.digest for entry in store.entries()] == [kept.digest]
    store.evict(keep="none")
    assert all(victim.read_bytes() == b"keep me" for victim in victims)


def test_metadata_under_another_name_or_through_a_link_is_not_an_entry(tmp_path):
    store = KVCacheStore(tmp_path)
    real = _fake_entry(store, _system(10, last="real"), 100, last_used=1.0)
    other = _key(_system(10, last="other"))
    (tmp_path / f"{other.digest}.bin").write_bytes(b"\0" * 100)
    # A copy of `real`'s metadata filed under another digest, and a link to it: neither is an entry of its own.
    (tmp_path / f"{other.digest}.json").write_bytes((tmp_path / f"{real.digest}.json").read_bytes())
    linked = _key(_system(10, last="linked"))
    (tmp_path / f"{linked.digest}.bin").write_bytes(b"\0" * 100)
    (tmp_path / f"{linked.digest}.json").symlink_to(tmp_path / f"{real.digest}.json")
    assert [entry.key.digest for entry in store.entries()] == [real.digest]


@pytest.mark.llama_server
def test_a_restore_over_other_content_keeps_a_speculative_server_decoding(llama_server, llama_state_dir):
    """Restoring over another prompt left the drafter's cache behind: every later request failed with HTTP 500
    ("failed to process speculative batch") until the slot was cleared. The slot is now emptied first."""
    system = "A speculative night.\n" + _system(30)
    events: list[PrefixCacheEvent] = []
    model = _model(llama_server.url)
    with LlamaServerAPI(llama_server.url, timeout_s=120.0) as api:
        first = PrefixCache.for_server(api, settings="max", notify=events.append, state_dir=llama_state_dir)
        assert first is not None
        first.wrap(model).complete(_messages(system, "First?"), [])
        model.complete(_messages("Another repository entirely.", "Hi"), [])  # the slot now holds other content
        later = PrefixCache.for_server(api, settings="max", notify=events.append, state_dir=llama_state_dir)
        assert later is not None
        reply = later.wrap(model).complete(_messages(system, "Second?"), [])
    assert [event.action for event in events] == ["saved", "restored"], events
    assert reply.stats.completion_tokens > 0 and reply.stats.prompt_tokens - reply.stats.cached_tokens < 30


@pytest.mark.llama_server
def test_two_slots_prefill_a_shared_prefix_once_and_the_other_slot_restores_it(tmp_path, llama_binary, llama_state_dir):
    """`run --parallel 2`, two tasks on one commit: the first prefills the prefix alone and saves it, the second
    waits for that file and restores it into its own slot instead of prefilling the same tokens alongside, while
    the first task's reply is still being decoded."""
    save_dir = tmp_path / "kv"
    request = _request(save_dir).model_copy(update={"parallel": 2})
    system = "Two tasks, one commit.\n" + _system(40)
    with running_server(request, llama_binary, llama_state_dir) as state:
        with LlamaServerAPI(state.url, timeout_s=120.0) as api:
            assert int(api.props()["total_slots"]) == 2
            server = PrefixCache.for_server(api, settings="max", notify=lambda _event: None, state_dir=llama_state_dir)
            assert server is not None
            events: dict[int, list[PrefixCacheEvent]] = {0: [], 1: []}
            replies: dict[int, object] = {}
            restored_at: list[float] = []
            answered_at: dict[int, float] = {}

            def notify(slot: int, event: PrefixCacheEvent) -> None:
                events[slot].append(event)
                if event.action == "restored":
                    restored_at.append(time.monotonic())

            def task(slot: int) -> None:
                cache = server.for_slot(slot, prefill_first=True)
                cache.notify = functools.partial(notify, slot)
                # Slot 0's reply is long, so that its decoding outlasts slot 1's wait.
                sampling = SamplingConfig(max_tokens=64 if slot == 0 else 2, seed=1, temperature=0.0)
                model = OpenAIChatModel(_model(state.url).config.model_copy(update={"sampling": sampling}), slot=slot)
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
            assert [event.action for event in events[0]] == ["saved"]
            assert [event.action for event in events[1]] == ["waiting", "restored"], events[1]
            assert "slot 0 is prefilling the same prefix" in events[1][0].message
            assert restored_at[0] < answered_at[0], "slot 1 restored while slot 0's reply was still decoding"
            assert replies[0].stats.completion_tokens > 10
            assert replies[0].stats.prompt_tokens - replies[0].stats.cached_tokens < 30, "its own prefill came first"
            assert replies[1].stats.prompt_tokens - replies[1].stats.cached_tokens < 30, replies[1].stats
            # Slot 1 really holds the prefix (the request was pinned there, not served by slot 0 again).
            probe = api.slot_action(1, "save", "probe.bin")
            assert int(probe["n_saved"]) >= replies[1].stats.prompt_tokens
