import pytest

from agent.protocol.stats import RequestStats, SpecCounters
from agent.record.metrics import percentile, speculation_warning, summarize
from agent.server.api import LlamaServerAPI
from agent.server.metrics import (
    accepted_per_position,
    parse_prometheus,
    scrape_spec_counters,
    spec_counters_from_text,
    speculation_configured,
)

from support.llama_fixtures import READ_FILE_TOOLS, REPOSITORY_SYSTEM, SYNTHETIC_RATES, chat_model

# The shape llama-server's /metrics prints (tools/server/server-task.cpp), numbers as C++ streams them.
METRICS_TEXT = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1.23457e+06
# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 245
# HELP llamacpp:spec_decode_num_accepted_tokens_total Speculative: Total draft tokens accepted by the target model
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 102
# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding verification steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 51
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 41.5
# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 40
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 30
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 32
"""


def test_parse_prometheus_drops_prefix_and_comments_and_reads_exponents():
    samples = parse_prometheus(METRICS_TEXT)
    assert samples["prompt_tokens_total"] == pytest.approx(1_234_570)
    assert samples["predicted_tokens_seconds"] == 41.5
    assert not any(key.startswith("#") or key.startswith("llamacpp:") for key in samples)


def test_a_metrics_answer_that_is_not_prometheus_text_gives_what_it_can_and_never_raises():
    text = "<html>not metrics</html>\nllamacpp:spec_decode_num_drafts_total 4\nllamacpp:tokens_predicted_total n/a\n"
    assert parse_prometheus(text) == {"spec_decode_num_drafts_total": 4.0}
    assert spec_counters_from_text("<!doctype html>\n<title>x</title>").drafts == 0


def test_spec_counters_give_acceptance_and_accepted_per_pass():
    counters = spec_counters_from_text(METRICS_TEXT)
    assert counters == SpecCounters(drafts=51, draft_tokens=245, accepted_tokens=102)
    assert counters.acceptance_rate == pytest.approx(102 / 245)
    assert counters.accepted_per_pass == pytest.approx(2.0)


def test_spec_counters_without_speculation_have_no_rates():
    counters = spec_counters_from_text("llamacpp:prompt_tokens_total 10\n")
    assert counters == SpecCounters()
    assert counters.acceptance_rate is None
    assert counters.accepted_per_pass is None


def test_spec_counter_deltas_subtract_field_by_field():
    later = SpecCounters(drafts=60, draft_tokens=300, accepted_tokens=150)
    delta = later - SpecCounters(drafts=51, draft_tokens=245, accepted_tokens=102)
    assert delta == SpecCounters(drafts=9, draft_tokens=55, accepted_tokens=48)


def test_accepted_per_position_is_ordered_by_position():
    assert accepted_per_position(METRICS_TEXT) == [40, 30, 32]


def test_percentile_interpolates_like_numpy():
    values = [float(value) for value in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([3.0], 95) == 3.0
    assert percentile([], 50) is None


def _stats(**fields) -> RequestStats:
    return RequestStats(timings_reported=True, **fields)


def test_summary_prefers_metrics_deltas_for_accepted_per_pass():
    stats = [
        _stats(
            prompt_tokens=1000,
            cached_tokens=0,
            completion_tokens=40,
            predicted_ms=1000,
            draft_tokens=50,
            draft_accepted=20,
            ttft_s=0.5,
            latency_s=2.0,
        ),
        _stats(
            prompt_tokens=1100,
            cached_tokens=1050,
            completion_tokens=60,
            predicted_ms=1000,
            draft_tokens=70,
            draft_accepted=40,
            ttft_s=0.1,
            latency_s=1.0,
        ),
    ]
    summary = summarize(stats, SpecCounters(drafts=20, draft_tokens=120, accepted_tokens=60))
    assert summary.requests == 2
    assert summary.cache_hit_ratio == pytest.approx(1050 / 2100)
    assert summary.generated_tokens == 100
    assert summary.decode_tokens_per_s == pytest.approx(50.0)
    assert summary.draft_tokens == 120
    assert summary.accepted_draft_tokens == 60
    assert summary.acceptance_rate == pytest.approx(0.5)
    assert (summary.accepted_per_pass, summary.accepted_per_pass_source) == (pytest.approx(3.0), "metrics")
    assert summary.ttft_p50_s == pytest.approx(0.3)
    assert summary.latency_p50_s == pytest.approx(1.5)


def test_summary_without_metrics_estimates_passes_and_says_so():
    # 100 generated, 60 of them accepted drafts: the target produced the other 40, one per pass.
    stats = [_stats(prompt_tokens=10, completion_tokens=100, draft_tokens=150, draft_accepted=60, latency_s=1.0)]
    summary = summarize(stats)
    assert summary.accepted_per_pass_source == "estimated"
    assert summary.accepted_per_pass == pytest.approx(60 / 40)


def test_summary_without_drafts_has_no_speculation_figures():
    summary = summarize([_stats(prompt_tokens=10, completion_tokens=5, latency_s=0.2)], SpecCounters())
    assert summary.acceptance_rate is None
    assert summary.accepted_per_pass is None
    assert summary.accepted_per_pass_source is None
    assert summary.ttft_p50_s is None


def test_summary_of_nothing_is_empty_not_an_error():
    summary = summarize([])
    assert summary.requests == 0
    assert summary.cache_hit_ratio is None
    assert summary.latency_p99_s is None


def test_warning_when_speculation_configured_but_nothing_drafted():
    summary = summarize([_stats(prompt_tokens=10, completion_tokens=50, latency_s=1.0)] * 3)
    warning = speculation_warning(summary, speculation_configured=True)
    assert warning is not None
    assert "no drafts" in warning and "3 requests" in warning and "--fit off" in warning
    assert speculation_warning(summary, speculation_configured=False) is None


def test_no_warning_when_drafts_were_made():
    summary = summarize([_stats(prompt_tokens=10, completion_tokens=50, draft_tokens=20, draft_accepted=5)])
    assert speculation_warning(summary, speculation_configured=True) is None


TURNS = 4


@pytest.mark.llama_server
def test_self_draft_speculation_shows_in_timings_and_metrics(llama_server):
    messages = [{"role": "user", "content": "Count from 1 to 40, separated by commas."}]
    with LlamaServerAPI(llama_server.url) as api:
        assert speculation_configured(api)
        before = scrape_spec_counters(api)
        # Greedy: at temperature 1.0 SmolLM2 sometimes stops after a few tokens ("1. One."), too few to draft on,
        # even seeded (a drafting server does not replay a seed exactly).
        turn = chat_model(llama_server, max_tokens=64, temperature=0.0).complete(messages, [])
        after = scrape_spec_counters(api)
    assert before is not None and after is not None
    delta = after - before
    assert turn.stats.draft_tokens > 0
    assert turn.stats.draft_accepted > 0
    assert delta.draft_tokens == turn.stats.draft_tokens
    assert delta.accepted_tokens == turn.stats.draft_accepted
    assert 0 < delta.drafts <= turn.stats.completion_tokens


@pytest.mark.llama_server
def test_a_short_session_summarises_cache_speculation_and_latency(llama_server):
    model = chat_model(llama_server, max_tokens=16)
    history = [{"role": "system", "content": REPOSITORY_SYSTEM}]
    # The repository prefix is warm, as for every task after a night's first; without this request the ratio
    # would depend on an earlier test having sent the same prefix to the session's server.
    model.complete([*history, {"role": "user", "content": "Hello."}], READ_FILE_TOOLS)
    stats = []
    with LlamaServerAPI(llama_server.url) as api:
        before = scrape_spec_counters(api)
        for number in range(TURNS):
            history.append({"role": "user", "content": f"Rewrite helper_{number} with a docstring."})
            turn = model.complete(history, READ_FILE_TOOLS)
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


# Speculative decoding with llama-server's synthetic acceptance: the counters must show the configured rates.
# Each request seeds llama-server's acceptance draws, so with full-length drafts the outcome is reproducible;
# the tolerance covers the few short drafts at the end of a request and drafted end-of-text tokens.
SEEDS = (0, 1)
TOKENS_PER_REQUEST = 160
TOLERANCE = 0.12


@pytest.mark.llama_server
def test_synthetic_acceptance_matches_the_configured_rates(llama_server_synthetic):
    body = {
        "messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper."}],
        "max_tokens": TOKENS_PER_REQUEST,
        # Synthetic acceptance makes the text invalid; ignoring end-of-generation keeps every request full length.
        "ignore_eos": True,
    }
    with LlamaServerAPI(llama_server_synthetic.url, timeout_s=300) as api:
        before = api.metrics_text()
        for seed in SEEDS:
            api.chat_completion({**body, "seed": seed})
        after = api.metrics_text()
    assert before is not None and after is not None
    delta = spec_counters_from_text(after) - spec_counters_from_text(before)
    before_positions = accepted_per_position(before) or [0.0] * len(SYNTHETIC_RATES)
    positions = [late - early for late, early in zip(accepted_per_position(after), before_positions, strict=True)]
    assert delta.drafts > 60
    measured = [count / delta.drafts for count in positions]
    print(f"\nsynthetic rates {SYNTHETIC_RATES}, measured per position {[round(rate, 3) for rate in measured]}")
    print(f"accepted per pass {delta.accepted_per_pass:.3f} (expected {sum(SYNTHETIC_RATES):.2f})")
    assert measured == pytest.approx(list(SYNTHETIC_RATES), abs=TOLERANCE)
    assert delta.accepted_per_pass == pytest.approx(sum(SYNTHETIC_RATES), abs=TOLERANCE * len(SYNTHETIC_RATES) / 2)
    assert delta.acceptance_rate == pytest.approx(sum(SYNTHETIC_RATES) / len(SYNTHETIC_RATES), abs=TOLERANCE)
