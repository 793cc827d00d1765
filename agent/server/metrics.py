"""llama-server's /metrics and /slots, read for the report: the speculative-decoding counters (whose deltas give
accepted tokens per verification pass) and whether speculation is configured at all (agent/record/metrics.py sums
them up)."""

from __future__ import annotations

import httpx

from agent.protocol.stats import SpecCounters
from agent.server.api import LlamaServerAPI
from agent.server.errors import ServerError

METRIC_PREFIX = "llamacpp:"


def parse_prometheus(text: str) -> dict[str, float]:
    """`name{labels} value` lines -> {"name{labels}": value}, prefix dropped; comments skipped, and so is any line
    that is not a sample (whatever answers on the server's port, the report's numbers must not fail a task)."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            samples[name.removeprefix(METRIC_PREFIX)] = float(value)
        except ValueError:
            continue
    return samples


def spec_counters_from_text(text: str) -> SpecCounters:
    samples = parse_prometheus(text)
    return SpecCounters(
        drafts=int(samples.get("spec_decode_num_drafts_total", 0)),
        draft_tokens=int(samples.get("spec_decode_num_draft_tokens_total", 0)),
        accepted_tokens=int(samples.get("spec_decode_num_accepted_tokens_total", 0)),
    )


def accepted_per_position(text: str) -> list[float]:
    """Accepted tokens per draft position, the per-position acceptance counts llama-server keeps."""
    samples = parse_prometheus(text)
    prefix = 'spec_decode_num_accepted_tokens_per_pos_total{position="'
    positions = {
        int(key[len(prefix) :].split('"')[0]): value for key, value in samples.items() if key.startswith(prefix)
    }
    return [positions[index] for index in sorted(positions)]


def scrape_spec_counters(api: LlamaServerAPI) -> SpecCounters | None:
    """None when the server runs without --metrics."""
    text = api.metrics_text()
    return None if text is None else spec_counters_from_text(text)


def speculation_configured(api: LlamaServerAPI) -> bool:
    """/props does not show speculation; /slots does, per slot."""
    for slot in api.slots():
        if slot.get("speculative"):
            return True
        types = slot.get("params", {}).get("speculative.types")
        if types and types != "none":
            return True
    return False


class SpeculationProbe:
    """The server's speculative-decoding counters, read for the report in one place: whether speculation is
    configured (asked once), and the counters now. The report's numbers must never fail a task: a server that
    cannot say gives False and None."""

    def __init__(self, api: LlamaServerAPI) -> None:
        self.api = api
        try:
            self.configured = speculation_configured(api)
        except (ServerError, httpx.HTTPError):
            self.configured = False

    def read(self) -> SpecCounters | None:
        try:
            return scrape_spec_counters(self.api)
        except (ServerError, httpx.HTTPError):
            return None
