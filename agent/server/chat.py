"""The model: llama-server's OpenAI-compatible chat endpoint, streamed, with llama-server's timings kept.

Failures are sorted into what the loop can act on: transient (retried here with backoff, RetryPolicy; a stream that
ends without a finish reason is one, StreamCut), output that
broke the tool-call format (the server's parser refused it, or left tool-call markup in the text: resampled here,
counted), a prompt over the context (ContextOverflow with the server's counts: the loop compacts the conversation)
and the rest (ModelUnavailable, ends the task). A stream with nothing from the server (no token, no prefill progress)
for `idle_timeout_s` is abandoned and retried; `request_timeout_s` bounds a whole request.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any, TypeVar

import openai

from agent.protocol.config import RETRY_BACKOFF_CAP_S, LLMConfig
from agent.protocol.events import GenerationProgress, PrefillProgress
from agent.protocol.model import (
    AssistantTurn,
    ContextOverflow,
    MalformedOutput,
    ModelUnavailable,
    RetriesExhausted,
    ToolCall,
)
from agent.protocol.stats import RequestStats

RetryListener = Callable[[str], None]
EventListener = Callable[[PrefillProgress | GenerationProgress], None]
T = TypeVar("T")

# DeepSeek V4's tool-call markup (DSML). Its parser (`common/parsers/deepseek.cpp`) turns a `<｜DSML｜tool_calls>`
# block into tool_calls and leaves in the text what it does not recognise: V3.2's `function_calls` block, an invoke
# outside a block, a block spelled with ASCII bars or without its DSML token. Agents that took such text for the
# final answer stopped early (OpenHands SDK PR #4845, hermes-agent #15453). Text the repository spells never matches:
# it reaches the model with a zero-width space after the bar (agent/safety/control_text.py).
TOOL_MARKUP = re.compile(r"<[|｜]DSML[|｜]|<[|｜]?tool_calls>")
LEFT_MARKUP_REASON = "tool-call markup left in the text (the server's parser did not take it for a call)"
# Prefill progress goes to the observer (and the transcript) at most once per tenth of the prompt: a live bar, not
# a line per batch.
PREFILL_PROGRESS_STEPS = 10
# The reply's token count goes to the observer at most this often: the live view's counter, one transcript line a
# second of generation at most.
GENERATION_PROGRESS_INTERVAL_S = 1.0


class StreamCut(Exception):
    """The stream ended (cleanly, as far as HTTP goes) before the server said the reply was complete: a partial
    reply, never an answer (taken for one it ended a task as no_changes). Retried like a dropped connection."""

    def __str__(self) -> str:
        return "the stream ended before the reply did (no finish reason)"


class RetryPolicy:
    """The one schedule for a server that fails transiently, shared by chat requests and the repository context:
    `retry_backoff_s`, doubling per retry, capped at RETRY_BACKOFF_CAP_S, at most `max_retries` retries."""

    def __init__(
        self,
        config: LLMConfig,
        *,
        on_retry: RetryListener | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self._on_retry = on_retry or (lambda _message: None)
        self._sleep = sleep

    def delay(self, retry: int) -> float:
        return min(RETRY_BACKOFF_CAP_S, self.config.retry_backoff_s * 2**retry)

    def call(self, attempt: Callable[[], T], transient: Callable[[Exception], str | None]) -> tuple[T, int]:
        """attempt()'s result and the retries it took. `transient` names a retryable failure (None: not one, it
        propagates); after the last retry the failure ends in ModelUnavailable with that reason."""
        retries = 0
        while True:
            try:
                return attempt(), retries
            except Exception as error:
                reason = transient(error)
                if reason is None:
                    raise
                if retries >= self.config.max_retries:
                    raise RetriesExhausted(f"model server failed {retries + 1} times, last: {reason}") from error
                delay = self.delay(retries)
                self._on_retry(f"retry {retries + 1}/{self.config.max_retries} in {delay:.1f}s after {reason}")
                self._sleep(delay)
                retries += 1


def _error_text(error: openai.APIError) -> str:
    body = error.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            return f"{inner.get('type', '')} {inner.get('message', '')}".strip()
    return str(error.message or error)


def _is_format_mismatch(error: openai.APIError) -> bool:
    """HTTP 500 before the stream, or an SSE error event in it: llama-server could not parse the model's output."""
    if isinstance(error, openai.APIStatusError) and error.status_code != 500:
        return False
    text = _error_text(error)
    return "does not match the expected" in text or "Failed to parse" in text


def _holds_tool_markup(turn: AssistantTurn) -> bool:
    """A turn without calls whose text still holds tool-call markup: a call the server's parser did not take, never
    an answer. Its reasoning counts when it has no content (the parser takes a block from unclosed reasoning too,
    `common/parsers/deepseek.cpp`, so one left there is broken as well)."""
    if turn.tool_calls:
        return False
    return TOOL_MARKUP.search(turn.content or turn.reasoning_content or "") is not None


def chat_body(messages: list[dict[str, Any]], tools: list[dict[str, Any]], effort: str) -> dict[str, Any]:
    """The fields of a chat request that shape its rendered prompt, and only those: the request sends exactly
    these, the saved prefixes render exactly these (agent/server/rendering.py) and the window counts exactly these
    (agent/run/stages/compactor.py), so all see the same tokens.
    `tool_choice` and `parallel_tool_calls` do not change the rendering of DeepSeek V4's template."""
    body: dict[str, Any] = {"messages": messages, "reasoning_effort": effort}
    if tools:
        body["tools"] = tools
        body["tool_choice"] = "auto"  # a string: llama-server reads the object form as "auto" anyway
    return body


def _is_context_overflow(error: openai.APIStatusError) -> bool:
    return error.status_code == 400 and "exceed_context_size" in _error_text(error)


def _overflow(error: openai.APIStatusError) -> ContextOverflow:
    """llama-server's exceed_context_size_error with its counts: `{"error": {..., "n_prompt_tokens": 4527,
    "n_ctx": 4096}}` (tools/server/server-common.cpp)."""
    body = error.body if isinstance(error.body, dict) else {}
    inner = body.get("error", body)
    counts = inner if isinstance(inner, dict) else {}

    def count(key: str) -> int | None:
        value = counts.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    return ContextOverflow(
        f"prompt exceeds the server's context: {_error_text(error)}",
        prompt_tokens=count("n_prompt_tokens"),
        n_ctx=count("n_ctx"),
    )


class OpenAIChatModel:
    def __init__(
        self,
        config: LLMConfig,
        *,
        on_retry: RetryListener | None = None,
        on_progress: EventListener | None = None,
        sleep: Callable[[float], None] = time.sleep,
        slot: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """slot: the server slot every request is pinned to (`id_slot`), the one whose KV cache the task reuses
        and saves; None lets the server choose. clock: what paces the generation progress events."""
        self.config = config
        self.name = config.model
        self.slot = slot
        self._on_retry = on_retry or (lambda _message: None)
        self._retry = RetryPolicy(config, on_retry=self._on_retry, sleep=sleep)
        self._on_progress = on_progress or (lambda _event: None)
        self._clock = clock
        # Our own retry loop counts and logs retries; the SDK's would hide them. httpx applies the timeout to each
        # read, so it is the idle timeout: prefill progress chunks and tokens reset it, a silent server trips it.
        # TLS settings only for https, as api.http_client builds them: the CA bundle was 20 ms of each client, and
        # a redirect met on plain HTTP is no safer verified.
        self._client = openai.OpenAI(
            base_url=config.server_url,
            api_key="sk-no-key-required",
            max_retries=0,
            timeout=config.idle_timeout_s,
            http_client=openai.DefaultHttpxClient(verify=config.server_url.startswith("https://")),
        )

    def _streamed(self, prompt: dict[str, Any]) -> dict[str, Any]:
        """What every request of this client carries besides its prompt: the slot, streaming with usage and
        prefill progress (return_progress: llama-server streams prompt_progress chunks while it processes the
        prompt). The prompt's fields go into the JSON body as they are, through extra_body (create() is given
        an empty stand-in for the one it requires, which they replace): given to create() itself, they went through
        the SDK's maybe_transform, which walks every message, tool schema and token against its typed parameters
        only to give them back unchanged, 15 ms of CPU for a request of 40 messages (more at every turn) and 115
        ms for a prefill of 8,000 tokens."""
        extra_body: dict[str, Any] = {**prompt, "return_progress": True}
        if self.slot is not None:
            extra_body["id_slot"] = self.slot
        return {
            "model": self.config.model,
            "stream": True,
            "stream_options": {"include_usage": True},
            "extra_body": extra_body,
        }

    def _request_arguments(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], resample: int
    ) -> dict[str, Any]:
        """resample: how many replies to this request broke the tool-call format so far. With a seed, each resample
        asks with the next seed: the same seed on the same prompt gives the same broken reply again, while a run
        with a seed stays reproducible. A transient retry keeps its seed."""
        sampling = self.config.sampling
        arguments: dict[str, Any] = {
            "messages": [],
            **self._streamed(chat_body(messages, tools, self.config.effort)),
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        arguments["extra_body"]["min_p"] = sampling.min_p
        if sampling.seed is not None:
            arguments["seed"] = sampling.seed + resample
        if sampling.max_tokens is not None:
            arguments["max_tokens"] = sampling.max_tokens
        return arguments

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        resamples = 0

        def attempt() -> AssistantTurn:
            nonlocal resamples
            while True:
                try:
                    turn = self._stream_once(messages, tools, resamples)
                except openai.APIError as error:
                    if not _is_format_mismatch(error):
                        raise
                    resamples = self._count_resample(resamples, _error_text(error))
                    continue
                if not _holds_tool_markup(turn):
                    return turn
                resamples = self._count_resample(resamples, LEFT_MARKUP_REASON)

        turn, retries = self._call(attempt)
        turn.stats.retries, turn.stats.resamples = retries, resamples
        return turn

    def prefill(self, tokens: list[int]) -> RequestStats:
        """Process exactly `tokens` into the slot's KV cache (`/v1/completions` with a token array, one token
        generated and never kept: the slot then holds the tokens and nothing more, to be saved as a prefix);
        progress events, retries and timeouts as for `complete`."""
        stats, retries = self._call(lambda: self._prefill_once(tokens))
        stats.retries = retries
        return stats

    def _call(self, attempt: Callable[[], T]) -> tuple[T, int]:
        try:
            return self._retry.call(attempt, self._transient_reason)
        except openai.APIStatusError as error:
            if _is_context_overflow(error):
                raise _overflow(error) from error
            raise ModelUnavailable(
                f"server rejected the request ({error.status_code}): {_error_text(error)}"
            ) from error

    def _transient_reason(self, error: Exception) -> str | None:
        """Why a failed request is worth repeating, or None when it is not (the same request would fail again)."""
        if isinstance(error, openai.APITimeoutError):
            return f"idle timeout: nothing from the server for {self.config.idle_timeout_s:g}s (--idle-timeout)"
        if isinstance(error, openai.APIStatusError):
            return f"HTTP {error.status_code}: {_error_text(error)}" if error.status_code >= 500 else None
        if isinstance(error, openai.APIConnectionError | StreamCut):
            return f"{error.__class__.__name__}: {error}"
        if isinstance(error, openai.APIError):  # an SSE error event in the middle of a stream
            return f"stream error: {_error_text(error)}"
        return None

    def _count_resample(self, resamples: int, reason: str) -> int:
        if resamples >= self.config.max_resamples:
            raise MalformedOutput(f"model output broke the tool-call format {resamples + 1} times: {reason}")
        self._on_retry(f"resample {resamples + 1}/{self.config.max_resamples}: {reason}")
        return resamples + 1

    def _stream_once(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], resample: int) -> AssistantTurn:
        accumulator = _StreamAccumulator(time.monotonic())
        arguments = self._request_arguments(messages, tools, resample)
        self._follow(self._client.chat.completions.create(**arguments), accumulator)
        if accumulator.finish_reason is None:
            raise StreamCut()
        return accumulator.finish()

    def _prefill_once(self, tokens: list[int]) -> RequestStats:
        accumulator = _StreamAccumulator(time.monotonic())
        # max_tokens 1: llama-server b11434 treats 0 alike (it still samples one token); 1 says what happens.
        stream = self._client.completions.create(prompt=[], max_tokens=1, **self._streamed({"prompt": tokens}))
        self._follow(stream, accumulator)
        return accumulator.finish().stats

    def _follow(self, stream: Any, accumulator: _StreamAccumulator) -> None:
        deadline = accumulator.started + self.config.request_timeout_s
        progress = _PrefillProgress(self._on_progress)
        generation = _GenerationProgress(self._on_progress, self._clock)
        with stream:
            for chunk in stream:
                accumulator.add(chunk)
                progress.add((chunk.model_extra or {}).get("prompt_progress"))
                generation.add(accumulator.token_chunks)
                if time.monotonic() > deadline:
                    raise ModelUnavailable(
                        f"request still running after {self.config.request_timeout_s:g}s (request_timeout_s)"
                    )


class _PrefillProgress:
    """Passes llama-server's prompt_progress on as small events: the first one, then one per step crossed."""

    def __init__(self, emit: EventListener) -> None:
        self._emit = emit
        self._next_step = 0

    def add(self, progress: Any) -> None:
        if not isinstance(progress, dict):
            return
        total, processed = int(progress.get("total") or 0), int(progress.get("processed") or 0)
        if total <= 0:
            return
        step = min(processed, total) * PREFILL_PROGRESS_STEPS // total
        if step < self._next_step:
            return
        self._next_step = step + 1
        cached = int(progress.get("cache") or 0)
        self._emit(PrefillProgress(processed=processed, total=total, cached=cached))


class _GenerationProgress:
    """Counts the reply's tokens as they stream (one delta chunk is one token in llama-server's stream) and passes
    the count on at most once per GENERATION_PROGRESS_INTERVAL_S: the live view's `generating 1,204 tokens`."""

    def __init__(self, emit: EventListener, clock: Callable[[], float]) -> None:
        self._emit = emit
        self._clock = clock
        self._first: float | None = None
        self._last_emitted = 0.0

    def add(self, tokens: int) -> None:
        if tokens == 0:
            return
        now = self._clock()
        if self._first is None:
            self._first = self._last_emitted = now
        elif now - self._last_emitted >= GENERATION_PROGRESS_INTERVAL_S:
            self._last_emitted = now
            self._emit(GenerationProgress(tokens=tokens, elapsed_s=round(now - self._first, 3)))


class _StreamAccumulator:
    """Folds streamed deltas into one turn; tool-call fragments arrive keyed by index."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.first_token_at: float | None = None
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.token_chunks = 0  # delta chunks that carried text, reasoning or a call: the tokens streamed so far
        self.usage: Any = None
        self.timings: dict[str, Any] | None = None

    def add(self, chunk: Any) -> None:
        extra = chunk.model_extra or {}
        if "timings" in extra:
            self.timings = extra["timings"]
        if chunk.usage is not None:
            self.usage = chunk.usage
        for choice in chunk.choices:
            delta = getattr(choice, "delta", None)
            if delta is None:  # a /v1/completions chunk (a prefill): its one token is not kept
                continue
            reasoning = (delta.model_extra or {}).get("reasoning_content")
            if delta.content or reasoning or delta.tool_calls:
                self.first_token_at = self.first_token_at or time.monotonic()
                self.token_chunks += 1
            if delta.content:
                self.content.append(delta.content)
            if reasoning:
                self.reasoning.append(reasoning)
            for fragment in delta.tool_calls or []:
                call = self.calls.setdefault(fragment.index, {"id": "", "name": "", "arguments": ""})
                call["id"] = fragment.id or call["id"]
                if fragment.function is not None:
                    call["name"] += fragment.function.name or ""
                    call["arguments"] += fragment.function.arguments or ""
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason

    def finish(self) -> AssistantTurn:
        calls = [
            ToolCall(id=call["id"] or f"call_{index}", name=call["name"], arguments=call["arguments"])
            for index, call in sorted(self.calls.items())
        ]
        return AssistantTurn(
            content="".join(self.content),
            reasoning_content="".join(self.reasoning) or None,
            tool_calls=calls,
            finish_reason=self.finish_reason,
            stats=self._stats(),
        )

    def _stats(self) -> RequestStats:
        now = time.monotonic()
        stats = RequestStats(
            latency_s=now - self.started,
            ttft_s=None if self.first_token_at is None else self.first_token_at - self.started,
        )
        if self.usage is not None:
            stats.prompt_tokens = self.usage.prompt_tokens or 0
            stats.completion_tokens = self.usage.completion_tokens or 0
            details = self.usage.prompt_tokens_details
            stats.cached_tokens = (details.cached_tokens or 0) if details is not None else 0
        if self.timings:
            timings = self.timings
            stats.timings_reported = True
            stats.cached_tokens = int(timings.get("cache_n", stats.cached_tokens))
            stats.prompt_ms = timings.get("prompt_ms")
            stats.predicted_ms = timings.get("predicted_ms")
            stats.predicted_per_second = timings.get("predicted_per_second")
            stats.draft_tokens = int(timings.get("draft_n", 0))
            stats.draft_accepted = int(timings.get("draft_n_accepted", 0))
            if not self.usage:
                stats.prompt_tokens = int(timings.get("prompt_n", 0)) + int(timings.get("cache_n", 0))
                stats.completion_tokens = int(timings.get("predicted_n", 0))
        return stats
