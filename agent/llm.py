"""The model: llama-server's OpenAI-compatible chat endpoint, streamed, with llama-server's timings kept.

Failures are sorted into what the loop can act on: transient (retried here with backoff), output that broke the
tool-call format (resampled here, counted), a prompt over the context (ContextOverflow, ends the task) and the rest
(ModelUnavailable, ends the task).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Protocol

import openai
from pydantic import BaseModel, computed_field

from agent.config import LLMConfig


class LLMError(Exception):
    """Ends the task; str() is a one-line reason."""


class ContextOverflow(LLMError):
    pass


class ModelUnavailable(LLMError):
    pass


class MalformedOutput(LLMError):
    pass


class ToolCall(BaseModel):
    id: str
    name: str
    arguments: str

    def history_arguments(self) -> str:
        """Arguments as they go back into the history. Chat templates parse them as a JSON object, so raw
        garbage from the model would make every later request fail; it is wrapped instead, still visible."""
        try:
            if isinstance(json.loads(self.arguments), dict):
                return self.arguments
        except json.JSONDecodeError:
            pass
        return json.dumps({"unparsed_arguments": self.arguments})


class RequestStats(BaseModel):
    """One request as llama-server reports it (usage + the non-standard `timings` object) plus our clock."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    prompt_ms: float | None = None
    predicted_ms: float | None = None
    predicted_per_second: float | None = None
    draft_tokens: int = 0
    draft_accepted: int = 0
    timings_reported: bool = False
    ttft_s: float | None = None
    latency_s: float = 0.0
    retries: int = 0
    resamples: int = 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cache_hit_ratio(self) -> float | None:
        return round(self.cached_tokens / self.prompt_tokens, 4) if self.prompt_tokens else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def acceptance_rate(self) -> float | None:
        return round(self.draft_accepted / self.draft_tokens, 4) if self.draft_tokens else None


class AssistantTurn(BaseModel):
    content: str = ""
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] = []
    finish_reason: str | None = None
    stats: RequestStats = RequestStats()

    def to_message(self) -> dict[str, Any]:
        """The history entry: reasoning is sent back unchanged because the V4 template keeps it with tools."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning_content:
            message["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.history_arguments()},
                }
                for call in self.tool_calls
            ]
        return message


class ChatModel(Protocol):
    name: str

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn: ...


RetryListener = Callable[[str], None]


def _error_text(error: openai.APIError) -> str:
    body = error.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            return f"{inner.get('type', '')} {inner.get('message', '')}".strip()
    return str(error.message or error)


def _is_format_mismatch(text: str) -> bool:
    return "does not match the expected" in text or "Failed to parse" in text


def _is_context_overflow(error: openai.APIStatusError) -> bool:
    return error.status_code == 400 and "exceed_context_size" in _error_text(error)


class OpenAIChatModel:
    def __init__(self, config: LLMConfig, *, on_retry: RetryListener | None = None) -> None:
        self.config = config
        self.name = config.model
        self._on_retry = on_retry or (lambda _message: None)
        # Our own retry loop counts and logs retries; the SDK's would hide them.
        self._client = openai.OpenAI(
            base_url=config.server_url, api_key="sk-no-key-required", max_retries=0, timeout=config.request_timeout_s
        )

    def _request_arguments(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        sampling = self.config.sampling
        extra_body: dict[str, Any] = {"min_p": sampling.min_p}
        arguments: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "reasoning_effort": self.config.effort,
            "stream": True,
            "stream_options": {"include_usage": True},
            "extra_body": extra_body,
        }
        if tools:
            arguments["tools"] = tools
            arguments["tool_choice"] = "auto"  # a string: llama-server reads the object form as "auto" anyway
        if sampling.seed is not None:
            arguments["seed"] = sampling.seed
        if sampling.max_tokens is not None:
            arguments["max_tokens"] = sampling.max_tokens
        return arguments

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        retries = resamples = 0
        while True:
            try:
                turn = self._stream_once(messages, tools)
            except openai.APIStatusError as error:
                if _is_context_overflow(error):
                    raise ContextOverflow(f"prompt exceeds the server's context: {_error_text(error)}") from error
                text = _error_text(error)
                if error.status_code == 500 and _is_format_mismatch(text):
                    resamples = self._count_resample(resamples, text)
                    continue
                if error.status_code != 503 and error.status_code < 500:
                    raise ModelUnavailable(f"server rejected the request ({error.status_code}): {text}") from error
                retries = self._count_retry(retries, f"HTTP {error.status_code}: {text}")
            except openai.APIConnectionError as error:
                retries = self._count_retry(retries, f"{error.__class__.__name__}: {error}")
            except openai.APIError as error:  # an SSE error event in the middle of a stream
                text = _error_text(error)
                if _is_format_mismatch(text):
                    resamples = self._count_resample(resamples, text)
                    continue
                retries = self._count_retry(retries, f"stream error: {text}")
            else:
                turn.stats.retries, turn.stats.resamples = retries, resamples
                return turn

    def _count_retry(self, retries: int, reason: str) -> int:
        if retries >= self.config.max_retries:
            raise ModelUnavailable(f"model server failed {retries + 1} times, last: {reason}")
        delay = min(60.0, self.config.retry_backoff_s * 2**retries)
        self._on_retry(f"retry {retries + 1}/{self.config.max_retries} in {delay:.1f}s after {reason}")
        time.sleep(delay)
        return retries + 1

    def _count_resample(self, resamples: int, reason: str) -> int:
        if resamples >= self.config.max_resamples:
            raise MalformedOutput(f"model output broke the tool-call format {resamples + 1} times: {reason}")
        self._on_retry(f"resample {resamples + 1}/{self.config.max_resamples}: {reason}")
        return resamples + 1

    def _stream_once(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> AssistantTurn:
        started = time.monotonic()
        stream = self._client.chat.completions.create(**self._request_arguments(messages, tools))
        accumulator = _StreamAccumulator(started)
        with stream:
            for chunk in stream:
                accumulator.add(chunk)
        return accumulator.finish()


class _StreamAccumulator:
    """Folds streamed deltas into one turn; tool-call fragments arrive keyed by index."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.first_token_at: float | None = None
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.timings: dict[str, Any] | None = None

    def add(self, chunk: Any) -> None:
        extra = chunk.model_extra or {}
        if "timings" in extra:
            self.timings = extra["timings"]
        if chunk.usage is not None:
            self.usage = chunk.usage
        for choice in chunk.choices:
            delta = choice.delta
            reasoning = (delta.model_extra or {}).get("reasoning_content")
            if delta.content or reasoning or delta.tool_calls:
                self.first_token_at = self.first_token_at or time.monotonic()
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
