"""The numbers of a model request and of a run: one request as llama-server reports it, the server's speculative-
decoding counters, and their summary in the report (agent/server/metrics.py computes it)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, computed_field


class SpecCounters(BaseModel):
    """llama-server's cumulative speculative-decoding counters."""

    drafts: int = 0  # verification passes
    draft_tokens: int = 0
    accepted_tokens: int = 0

    def __sub__(self, earlier: SpecCounters) -> SpecCounters:
        return SpecCounters(
            drafts=self.drafts - earlier.drafts,
            draft_tokens=self.draft_tokens - earlier.draft_tokens,
            accepted_tokens=self.accepted_tokens - earlier.accepted_tokens,
        )

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def accepted_per_pass(self) -> float | None:
        return self.accepted_tokens / self.drafts if self.drafts else None


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


class MetricsSummary(BaseModel):
    requests: int
    prompt_tokens: int
    cached_tokens: int
    cache_hit_ratio: float | None
    generated_tokens: int
    decode_tokens_per_s: float | None
    draft_tokens: int
    accepted_draft_tokens: int
    acceptance_rate: float | None
    accepted_per_pass: float | None
    accepted_per_pass_source: Literal["metrics", "estimated"] | None
    ttft_p50_s: float | None
    latency_p50_s: float | None
    latency_p95_s: float | None
    latency_p99_s: float | None
