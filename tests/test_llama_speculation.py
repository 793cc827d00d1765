"""Speculative decoding with llama-server's synthetic acceptance: the counters must show the configured rates."""

import pytest

from agent.llama_api import LlamaServerAPI
from agent.metrics import accepted_per_position, spec_counters_from_text

from llama_fixtures import SYNTHETIC_RATES

pytestmark = pytest.mark.llama_server

# Each request seeds llama-server's acceptance draws, so with full-length drafts the outcome is reproducible;
# the tolerance covers the few short drafts at the end of a request and drafted end-of-text tokens.
SEEDS = (0, 1)
TOKENS_PER_REQUEST = 160
TOLERANCE = 0.12


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
