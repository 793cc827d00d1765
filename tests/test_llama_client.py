"""The streaming client against a real llama-server: usage, timings, the prompt cache, speculation, a summary."""

import time

import pytest

from agent.config import LLMConfig, SamplingConfig
from agent.llama_api import LlamaServerAPI
from agent.llm import OpenAIChatModel
from agent.metrics import scrape_spec_counters, speculation_configured, speculation_warning, summarize
from agent.server.launcher import ServerState

pytestmark = pytest.mark.llama_server

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]
# About a thousand tokens of stable prefix, like the packed repository in front of a real conversation.
REPOSITORY = "".join(
    f"def helper_{number}(value: int) -> int:\n    return value * {number} + {number % 7}\n\n" for number in range(40)
)
SYSTEM = f"You are a refactoring assistant. The repository:\n{REPOSITORY}"
TURNS = 4


def _model(state: ServerState, max_tokens: int, **listeners) -> OpenAIChatModel:
    config = LLMConfig(
        server_url=state.url,
        server_explicit=True,
        model="smollm2",
        sampling=SamplingConfig(max_tokens=max_tokens, seed=7),
        max_retries=0,
    )
    return OpenAIChatModel(config, **listeners)


def test_streamed_turn_carries_usage_and_timings(llama_server):
    messages = [{"role": "system", "content": "You help with code."}, {"role": "user", "content": "Say hello."}]
    turn = _model(llama_server, max_tokens=24).complete(messages, TOOLS)
    stats = turn.stats
    assert turn.content or turn.tool_calls
    assert turn.finish_reason in {"stop", "length", "tool_calls"}
    assert stats.timings_reported
    with LlamaServerAPI(llama_server.url) as api:
        # The template wraps the two messages in role markers: more tokens than their text alone.
        assert stats.prompt_tokens > len(api.tokenize("You help with code. Say hello."))
        assert abs(len(api.tokenize(turn.content)) - stats.completion_tokens) <= 2
    assert 0 < stats.completion_tokens <= 24
    assert stats.prompt_ms is not None and stats.prompt_ms > 0
    assert stats.predicted_ms is not None and stats.predicted_ms > 0
    assert stats.predicted_per_second is not None and stats.predicted_per_second > 0
    assert stats.ttft_s is not None and 0 < stats.ttft_s <= stats.latency_s


def test_a_long_prompt_streams_prefill_progress(llama_server):
    events = []
    # A fresh first line: nothing of this prompt is in the server's cache, so all of it is prefilled.
    system = f"Session {time.time_ns()}.\n{SYSTEM}"
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "What does helper_3 do?"}]
    turn = _model(llama_server, max_tokens=8, on_progress=events.append).complete(messages, TOOLS)
    print(f"\nprefill progress events: {events}")
    assert events, "no prompt_progress chunk reached the observer"
    assert {event.type for event in events} == {"prefill_progress"}
    assert {event.total for event in events} == {turn.stats.prompt_tokens}
    processed = [event.processed for event in events]
    assert processed == sorted(processed)
    assert processed[-1] == turn.stats.prompt_tokens
    assert len(events) <= 11  # a few per request, not one per batch


def test_second_turn_reads_the_prefix_from_the_cache(llama_server):
    model = _model(llama_server, max_tokens=16)
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What does helper_3 do?"}]
    first = model.complete(history, TOOLS)
    history += [first.to_message(), {"role": "user", "content": "And helper_4?"}]
    second = model.complete(history, TOOLS)
    print(f"\nturn 2: {second.stats.cached_tokens} of {second.stats.prompt_tokens} prompt tokens cached")
    assert first.stats.cached_tokens < 0.5 * first.stats.prompt_tokens
    assert second.stats.prompt_tokens > first.stats.prompt_tokens > 1000
    assert second.stats.cached_tokens >= 0.95 * second.stats.prompt_tokens


def test_self_draft_speculation_shows_in_timings_and_metrics(llama_server):
    messages = [{"role": "user", "content": "Count from 1 to 40, separated by commas."}]
    with LlamaServerAPI(llama_server.url) as api:
        assert speculation_configured(api)
        before = scrape_spec_counters(api)
        turn = _model(llama_server, max_tokens=64).complete(messages, [])
        after = scrape_spec_counters(api)
    assert before is not None and after is not None
    delta = after - before
    assert turn.stats.draft_tokens > 0
    assert turn.stats.draft_accepted > 0
    assert delta.draft_tokens == turn.stats.draft_tokens
    assert delta.accepted_tokens == turn.stats.draft_accepted
    assert 0 < delta.drafts <= turn.stats.completion_tokens


def test_a_short_session_summarises_cache_speculation_and_latency(llama_server):
    model = _model(llama_server, max_tokens=16)
    history = [{"role": "system", "content": SYSTEM}]
    stats = []
    with LlamaServerAPI(llama_server.url) as api:
        before = scrape_spec_counters(api)
        for number in range(TURNS):
            history.append({"role": "user", "content": f"Rewrite helper_{number} with a docstring."})
            turn = model.complete(history, TOOLS)
            history.append(turn.to_message())
            stats.append(turn.stats)
        after = scrape_spec_counters(api)
    assert before is not None and after is not None
    summary = summarize(stats, after - before)
    print(f"\nmeasured on SmolLM2 self-draft: {summary.model_dump_json(indent=2)}")
    assert summary.requests == TURNS
    assert summary.cache_hit_ratio is not None and summary.cache_hit_ratio > 0.8
    assert summary.accepted_per_pass_source == "metrics"
    assert summary.acceptance_rate is not None and 0 < summary.acceptance_rate <= 1
    assert summary.accepted_per_pass is not None and summary.accepted_per_pass > 0
    assert summary.latency_p50_s is not None and summary.latency_p99_s is not None
    assert summary.latency_p50_s <= summary.latency_p95_s <= summary.latency_p99_s
    assert speculation_warning(summary, speculation_configured=True) is None
