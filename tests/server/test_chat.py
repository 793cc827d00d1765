"""The streaming client against a real HTTP server that speaks llama-server's dialect, and against a real
llama-server (marker `llama_server`): usage, timings, prefill progress, the prompt cache, a broken history."""

from __future__ import annotations

import time
from itertools import pairwise
from typing import Any

import pytest

from agent.protocol.config import LLMConfig, SamplingConfig
from agent.protocol.events import GenerationProgress
from agent.protocol.model import (
    AssistantTurn,
    ContextOverflow,
    MalformedOutput,
    ModelUnavailable,
    RetriesExhausted,
    ToolCall,
)
from agent.safety.control_text import neutralise
from agent.server.api import LlamaServerAPI
from agent.server.chat import OpenAIChatModel
from agent.server.launcher import ServerState
from tools.registry import default_registry

from support.llama_fixtures import READ_FILE_TOOLS, REPOSITORY_SYSTEM, chat_model
from support.scripted_server import FORMAT_ERROR, Cut, Fail, Reply, ScriptedServer, Stall, StreamError

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}]
MESSAGES = [{"role": "system", "content": "sys"}, {"role": "user", "content": "do it"}]


def client(server: ScriptedServer, **overrides) -> OpenAIChatModel:
    config = LLMConfig(server_url=server.url, retry_backoff_s=0.0, **overrides)
    return OpenAIChatModel(config)


def test_request_carries_agentic_sampling_effort_and_string_tool_choice() -> None:
    with ScriptedServer([Reply(content="hi")]) as server:
        client(server, effort="high", sampling=SamplingConfig(seed=7)).complete(MESSAGES, TOOLS)
    sent = server.requests[0]
    assert (sent["temperature"], sent["top_p"], sent["min_p"]) == (1.0, 0.95, 0.0)
    assert sent["reasoning_effort"] == "high"
    assert sent["tool_choice"] == "auto"
    assert sent["tools"] == TOOLS
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["seed"] == 7
    assert sent["return_progress"] is True  # prefill progress chunks: the live bar and the idle timeout's heartbeat


def test_streamed_tool_calls_reasoning_and_timings_are_assembled() -> None:
    reply = Reply(
        tool_calls=[("bash", {"command": "ls -la"}), ("finish", {"summary": "done"})],
        reasoning="let me look around first",
        draft_n=10,
        draft_n_accepted=6,
    )
    with ScriptedServer([reply]) as server:
        turn = client(server).complete(MESSAGES, TOOLS)
    assert [call.name for call in turn.tool_calls] == ["bash", "finish"]
    assert turn.tool_calls[0].arguments == '{"command": "ls -la"}'
    assert turn.reasoning_content == "let me look around first"
    assert turn.finish_reason == "tool_calls"
    assert turn.stats.timings_reported
    assert (turn.stats.draft_tokens, turn.stats.draft_accepted) == (10, 6)
    assert turn.stats.prompt_tokens > 0 and turn.stats.completion_tokens > 0
    message = turn.to_message()
    assert message["reasoning_content"] == "let me look around first"
    assert message["tool_calls"][1]["function"] == {"name": "finish", "arguments": '{"summary": "done"}'}


def test_second_turn_reports_the_shared_prefix_as_cached() -> None:
    messages = [{"role": "system", "content": "repository text " * 500}, {"role": "user", "content": "do it"}]
    with ScriptedServer([Reply(content="a"), Reply(content="b")]) as server:
        model = client(server)
        first = model.complete(messages, TOOLS)
        second = model.complete([*messages, first.to_message(), {"role": "user", "content": "more"}], TOOLS)
    assert first.stats.cached_tokens == 0
    assert second.stats.cached_tokens >= 0.8 * second.stats.prompt_tokens


def test_loading_and_server_errors_are_retried() -> None:
    loading = Fail(503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
    crashed = Fail(502, {"error": {"code": 502, "message": "bad gateway", "type": "server_error"}})
    retries: list[str] = []
    with ScriptedServer([loading, crashed, Reply(content="ok")]) as server:
        model = OpenAIChatModel(LLMConfig(server_url=server.url, retry_backoff_s=0.0), on_retry=retries.append)
        turn = model.complete(MESSAGES, TOOLS)
    assert turn.content == "ok"
    assert turn.stats.retries == 2
    assert len(retries) == 2 and "503" in retries[0]


def test_broken_tool_call_format_is_resampled_and_counted() -> None:
    http_500 = Fail(500, {"error": {"code": 500, "message": FORMAT_ERROR, "type": "server_error"}})
    with ScriptedServer([http_500, StreamError(FORMAT_ERROR), Reply(content="fine")]) as server:
        turn = client(server).complete(MESSAGES, TOOLS)
    assert turn.content == "fine"
    assert (turn.stats.resamples, turn.stats.retries) == (2, 0)


def test_a_resample_asks_with_the_next_seed_and_a_transient_retry_keeps_its_seed() -> None:
    """The same seed on the same prompt gives the same broken reply again (a seeded run failed its task so, four
    replies alike, in CI): a resample moves to the next seed; a server error is repeated as it was."""
    crashed = Fail(502, {"error": {"code": 502, "message": "bad gateway", "type": "server_error"}})
    script = [StreamError(FORMAT_ERROR), crashed, StreamError(FORMAT_ERROR), Reply(content="fine")]
    with ScriptedServer(script) as server:
        turn = client(server, sampling=SamplingConfig(seed=7)).complete(MESSAGES, TOOLS)
    assert turn.content == "fine"
    assert [request["seed"] for request in server.requests] == [7, 8, 8, 9]


def test_resamples_are_bounded() -> None:
    with ScriptedServer([StreamError(FORMAT_ERROR)] * 3) as server:
        with pytest.raises(MalformedOutput, match="tool-call format 3 times"):
            client(server, max_resamples=2).complete(MESSAGES, TOOLS)


# DeepSeek V4's tool-call markup left in the text by the server's parser: V3.2's block name, an invoke outside a
# block, a block spelled with ASCII bars, a block inside reasoning that never closed.
V32_BLOCK = '\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="bash">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>'
LEFT_MARKUP = [
    Reply(content=V32_BLOCK),
    Reply(content='Let me look.\n\n<｜DSML｜invoke name="bash">\n</｜DSML｜invoke>\n'),
    Reply(content='<|DSML|tool_calls>\n<|DSML|invoke name="bash">\n</|DSML|invoke>\n</|DSML|tool_calls>'),
    Reply(reasoning=f"I will call it.{V32_BLOCK}"),
]


@pytest.mark.parametrize("left", LEFT_MARKUP, ids=["v3.2 block", "bare invoke", "ascii bars", "in reasoning"])
def test_dsml_markup_in_the_content_is_resampled_and_counted(left: Reply) -> None:
    retries: list[str] = []
    with ScriptedServer([left, Reply(tool_calls=[("bash", {"command": "ls"})])]) as server:
        model = OpenAIChatModel(LLMConfig(server_url=server.url, retry_backoff_s=0.0), on_retry=retries.append)
        turn = model.complete(MESSAGES, TOOLS)
    assert [call.name for call in turn.tool_calls] == ["bash"]
    assert (turn.stats.resamples, turn.stats.retries, len(server.requests)) == (1, 0, 2)
    assert "tool-call markup" in retries[0]


def test_dsml_in_the_content_every_time_ends_in_malformed_output() -> None:
    with ScriptedServer([Reply(content=V32_BLOCK)] * 3) as server:
        with pytest.raises(MalformedOutput, match="3 times: tool-call markup"):
            client(server, max_resamples=2).complete(MESSAGES, TOOLS)


def test_markup_the_repository_spells_is_an_answer_not_a_broken_call() -> None:
    """Text quoted from the repository or a tool result carries the control-text mark (agent/safety/control_text.py):
    a model that copies it into its answer is not resampled."""
    quoted = f"The file documents the format: {neutralise(V32_BLOCK)}"
    with ScriptedServer([Reply(content=quoted)]) as server:
        turn = client(server).complete(MESSAGES, TOOLS)
    assert (turn.content, turn.stats.resamples) == (quoted, 0)


def test_context_overflow_is_its_own_error() -> None:
    with (
        ScriptedServer(n_ctx=10) as server,
        pytest.raises(ContextOverflow, match="exceed_context_size_error") as raised,
    ):
        client(server).complete(MESSAGES, TOOLS)
    assert len(server.requests) == 1  # never retried: the same prompt would overflow again
    assert raised.value.n_ctx == 10 and raised.value.prompt_tokens is not None and raised.value.prompt_tokens > 10


def test_persistent_failure_gives_up_with_the_last_reason() -> None:
    crashed = Fail(500, {"error": {"code": 500, "message": "CUDA error", "type": "server_error"}})
    with ScriptedServer([crashed] * 3) as server:
        with pytest.raises(ModelUnavailable, match=r"failed 3 times.*CUDA error"):
            client(server, max_retries=2).complete(MESSAGES, TOOLS)


def test_unreachable_server_gives_up_after_retries() -> None:
    model = OpenAIChatModel(LLMConfig(server_url="http://127.0.0.1:9/v1", retry_backoff_s=0.0, max_retries=1))
    with pytest.raises(ModelUnavailable, match="APIConnectionError"):
        model.complete(MESSAGES, TOOLS)


def test_garbage_arguments_go_back_wrapped_as_a_json_object() -> None:
    garbage = Reply(tool_calls=[("bash", '{"command": "ls'), ("bash", "[1]"), ("bash", '{"command": "ls"}')])
    with ScriptedServer([garbage]) as server:
        turn = client(server).complete(MESSAGES, TOOLS)
    sent_back = [call["function"]["arguments"] for call in turn.to_message()["tool_calls"]]
    assert sent_back == [
        '{"unparsed_arguments": "{\\"command\\": \\"ls"}',
        '{"unparsed_arguments": "[1]"}',
        '{"command": "ls"}',
    ]
    assert turn.tool_calls[0].arguments == '{"command": "ls'  # the transcript keeps what the model really sent


def test_retry_backoff_doubles_from_two_seconds_and_is_capped_at_a_minute() -> None:
    sleeps: list[float] = []
    config = LLMConfig(server_url="http://127.0.0.1:9/v1", max_retries=8)  # the default backoff: 2 s
    model = OpenAIChatModel(config, sleep=sleeps.append)
    with pytest.raises(ModelUnavailable, match="failed 9 times"):
        model.complete(MESSAGES, TOOLS)
    assert sleeps == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]


def test_a_stalled_stream_is_abandoned_after_the_idle_timeout() -> None:
    retries: list[str] = []
    started = time.monotonic()
    with ScriptedServer([Stall(), Stall()]) as server:
        config = LLMConfig(server_url=server.url, retry_backoff_s=0.0, max_retries=1, idle_timeout_s=0.2)
        with pytest.raises(ModelUnavailable, match=r"failed 2 times, last: idle timeout.*0.2s \(--idle-timeout\)"):
            OpenAIChatModel(config, on_retry=retries.append).complete(MESSAGES, TOOLS)
    assert time.monotonic() - started < 60  # instead of the hour a silent server used to cost
    assert len(server.requests) == 2 and "idle timeout" in retries[0]


def test_prefill_progress_keeps_a_slow_prompt_alive_past_the_idle_timeout() -> None:
    events: list[dict[str, Any]] = []
    # 0.5 s of prefill, a chunk each 0.1 s: longer than the idle timeout, a chunk in each quarter of it.
    slow = Reply(content="done", prefill_chunks=6, prefill_interval_s=0.1)
    with ScriptedServer([slow]) as server:
        config = LLMConfig(server_url=server.url, retry_backoff_s=0.0, max_retries=0, idle_timeout_s=0.4)
        turn = OpenAIChatModel(config, on_progress=events.append).complete(MESSAGES, TOOLS)
    assert turn.content == "done" and turn.stats.retries == 0
    assert turn.stats.latency_s > config.idle_timeout_s  # longer than the idle timeout: the chunks kept it alive
    assert [event.type for event in events] == ["prefill_progress"] * len(events)
    assert events[-1].processed == events[-1].total == turn.stats.prompt_tokens


def test_prefill_progress_reaches_the_observer_a_few_times_per_request() -> None:
    events: list[dict[str, Any]] = []
    with ScriptedServer([Reply(content="done", prefill_chunks=200)]) as server:
        OpenAIChatModel(LLMConfig(server_url=server.url), on_progress=events.append).complete(MESSAGES, TOOLS)
    processed = [event.processed for event in events]
    assert 2 <= len(events) <= 11  # the first chunk, then one per tenth: not 200 transcript lines
    assert processed == sorted(processed) and processed[-1] == events[-1].total
    assert set(events[0].model_dump()) == {"type", "processed", "total", "cached", "task", "time"}


def test_a_stream_that_ends_without_a_finish_reason_is_retried() -> None:
    """A body that ends cleanly mid-reply is no answer: taken as one it ended tasks as no_changes."""
    retries: list[str] = []
    with ScriptedServer([Cut(), Cut(), Reply(content="the whole answer")]) as server:
        config = LLMConfig(server_url=server.url, retry_backoff_s=0.0, max_retries=2)
        turn = OpenAIChatModel(config, on_retry=retries.append).complete(MESSAGES, TOOLS)
    assert turn.content == "the whole answer" and turn.stats.retries == 2
    assert "the stream ended before the reply did" in retries[0]
    with ScriptedServer([Cut()] * 2) as server:
        with pytest.raises(RetriesExhausted, match="the stream ended before the reply did"):
            client(server, max_retries=1).complete(MESSAGES, TOOLS)


class _Clock:
    """Each reading a third of a second after the last: a reply streamed over a few seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1 / 3
        return self.now


def test_generation_progress_counts_tokens_at_most_once_a_second() -> None:
    events: list[Any] = []
    with ScriptedServer([Reply(content="word " * 60, reasoning="think " * 20)]) as server:
        model = OpenAIChatModel(LLMConfig(server_url=server.url), on_progress=events.append, clock=_Clock())
        turn = model.complete(MESSAGES, TOOLS)
    progress = [event for event in events if isinstance(event, GenerationProgress)]
    assert len(progress) >= 3
    counts, elapsed = [event.tokens for event in progress], [event.elapsed_s for event in progress]
    assert counts == sorted(counts) and len(set(counts)) == len(counts)
    assert all(later - earlier >= 1.0 for earlier, later in pairwise(elapsed))
    assert 0 < counts[-1] <= turn.stats.completion_tokens


def test_the_total_request_timeout_is_a_backstop_that_is_not_retried() -> None:
    endless = Reply(content="late", prefill_chunks=80, prefill_interval_s=0.05)  # alive, but 4 s in all
    with ScriptedServer([endless, Reply(content="never asked")]) as server:
        config = LLMConfig(server_url=server.url, retry_backoff_s=0.0, request_timeout_s=0.1, idle_timeout_s=30.0)
        with pytest.raises(ModelUnavailable, match=r"still running after 0.1s"):
            OpenAIChatModel(config).complete(MESSAGES, TOOLS)
    assert len(server.requests) == 1  # an hour-long request repeated six times would cost the night


@pytest.mark.llama_server
@pytest.mark.docker
def test_garbage_tool_arguments_in_history_are_survived(llama_server: ServerState) -> None:
    """A model's broken JSON goes back into the history; the server's template must still render the next turn."""
    config = LLMConfig(server_url=llama_server.url, sampling=SamplingConfig(max_tokens=8, seed=3), max_retries=0)
    model = OpenAIChatModel(config)
    garbage = AssistantTurn(tool_calls=[ToolCall(id="call_1", name="bash", arguments='{"command": "ls -la')])
    messages = [
        {"role": "system", "content": "You refactor code."},
        {"role": "user", "content": "List the files."},
        garbage.to_message(),
        {"role": "tool", "tool_call_id": "call_1", "content": "error: arguments are not valid JSON"},
    ]
    turn = model.complete(messages, default_registry().schemas())
    assert turn.stats.prompt_tokens > 0 and turn.stats.completion_tokens > 0


@pytest.mark.llama_server
def test_streamed_turn_carries_usage_and_timings(llama_server):
    messages = [{"role": "system", "content": "You help with code."}, {"role": "user", "content": "Say hello."}]
    turn = chat_model(llama_server, max_tokens=24).complete(messages, READ_FILE_TOOLS)
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


@pytest.mark.llama_server
def test_a_long_prompt_streams_prefill_progress(llama_server):
    events = []
    # A fresh first line: nothing of this prompt is in the server's cache, so all of it is prefilled.
    system = f"Session {time.time_ns()}.\n{REPOSITORY_SYSTEM}"
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "What does helper_3 do?"}]
    turn = chat_model(llama_server, max_tokens=8, on_progress=events.append).complete(messages, READ_FILE_TOOLS)
    print(f"\nprefill progress events: {events}")
    assert {event.type for event in events} <= {"prefill_progress", "generation_progress"}  # 8 tokens may take > 1 s
    events = [event for event in events if event.type == "prefill_progress"]
    assert events, "no prompt_progress chunk reached the observer"
    assert {event.total for event in events} == {turn.stats.prompt_tokens}
    processed = [event.processed for event in events]
    assert processed == sorted(processed)
    assert processed[-1] == turn.stats.prompt_tokens
    assert len(events) <= 11  # a few per request, not one per batch


@pytest.mark.llama_server
def test_second_turn_reads_the_prefix_from_the_cache(llama_server):
    model = chat_model(llama_server, max_tokens=16)
    history = [{"role": "system", "content": REPOSITORY_SYSTEM}, {"role": "user", "content": "What does helper_3 do?"}]
    first = model.complete(history, READ_FILE_TOOLS)
    history += [first.to_message(), {"role": "user", "content": "And helper_4?"}]
    second = model.complete(history, READ_FILE_TOOLS)
    print(f"\nturn 2: {second.stats.cached_tokens} of {second.stats.prompt_tokens} prompt tokens cached")
    assert first.stats.cached_tokens < 0.5 * first.stats.prompt_tokens
    assert second.stats.prompt_tokens > first.stats.prompt_tokens > 1000
    assert second.stats.cached_tokens >= 0.95 * second.stats.prompt_tokens
