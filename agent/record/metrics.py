"""Speculation, prompt-cache and latency metrics of a task and a run, from per-request stats and the deltas of
llama-server's counters (agent/server/metrics.py scrapes them).

Acceptance rate alone misleads: a drafter that proposes 5 tokens at 46% beats one proposing 2 at 65%. What pays
is accepted tokens per verification pass (accepted / drafts in /metrics), so that is what the summary leads with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from agent.protocol.records import RunSummary, TaskSummary
from agent.protocol.stats import MetricsSummary, RequestStats, SpecCounters


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _estimated_accepted_per_pass(stats: list[RequestStats]) -> float | None:
    """Without /metrics the number of passes is unknown; when every step drafts, each pass yields its accepted
    tokens plus one token of the target's own, so passes ~= generated - accepted over the requests that drafted."""
    drafting = [item for item in stats if item.draft_tokens > 0]
    accepted = sum(item.draft_accepted for item in drafting)
    passes = sum(item.completion_tokens for item in drafting) - accepted
    return accepted / passes if passes > 0 else None


def summarize(stats: list[RequestStats], spec_delta: SpecCounters | None = None) -> MetricsSummary:
    prompt_tokens = sum(item.prompt_tokens for item in stats)
    cached_tokens = sum(item.cached_tokens for item in stats)
    timed = [item for item in stats if item.predicted_ms]
    decode_seconds = sum(item.predicted_ms or 0.0 for item in timed) / 1000
    draft_tokens = sum(item.draft_tokens for item in stats)
    accepted = sum(item.draft_accepted for item in stats)
    if spec_delta is not None and spec_delta.drafts > 0:
        per_pass, source = spec_delta.accepted_per_pass, "metrics"
    else:
        per_pass = _estimated_accepted_per_pass(stats)
        source = "estimated" if per_pass is not None else None
    latencies = [item.latency_s for item in stats]
    return MetricsSummary(
        requests=len(stats),
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
        cache_hit_ratio=cached_tokens / prompt_tokens if prompt_tokens else None,
        generated_tokens=sum(item.completion_tokens for item in stats),
        decode_tokens_per_s=sum(item.completion_tokens for item in timed) / decode_seconds if decode_seconds else None,
        draft_tokens=draft_tokens,
        accepted_draft_tokens=accepted,
        acceptance_rate=accepted / draft_tokens if draft_tokens else None,
        accepted_per_pass=per_pass,
        accepted_per_pass_source=source,
        ttft_p50_s=percentile([item.ttft_s for item in stats if item.ttft_s is not None], 50),
        latency_p50_s=percentile(latencies, 50),
        latency_p95_s=percentile(latencies, 95),
        latency_p99_s=percentile(latencies, 99),
    )


def speculation_warning(summary: MetricsSummary, speculation_configured: bool) -> str | None:
    """The failure that HTTP 200s hide: a drafter that makes no drafts silently costs about half the throughput."""
    if speculation_configured and summary.generated_tokens > 0 and summary.draft_tokens == 0:
        return (
            f"speculative decoding is configured but no drafts were made in {summary.requests} requests "
            f"({summary.generated_tokens} tokens generated without it): is --fit off set? run `refactor-agent doctor`"
        )
    return None


def delta(after: SpecCounters | None, before: SpecCounters | None) -> SpecCounters | None:
    """The server's counters over a stretch of the run (None when either end could not be read)."""
    return after - before if after is not None and before is not None else None


def measure(
    report: TaskSummary | RunSummary, requests: list[RequestStats], spec_delta: SpecCounters | None, speculation: bool
) -> None:
    """A task's or the run's metrics, and the warning a drafter that made no drafts deserves."""
    report.metrics = summarize(requests, spec_delta)
    warning = speculation_warning(report.metrics, speculation)
    report.warnings = [warning] if warning else []
