"""Triton's Prometheus counters and the served model's token-latency histograms (vLLM's
names, `serving_metrics`) for one model, parsed with prometheus_client's parser, their
change over an analysis interval, and quantiles of a histogram's change computed as
PromQL's `histogram_quantile` does."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

COUNTERS = {
    "nv_inference_request_success": "success",
    "nv_inference_request_failure": "failure",
    "nv_inference_request_duration_us": "duration_us",
    "nv_inference_count": "inferences",
    "vllm:generation_tokens_total": "generated_tokens",
}
# The token-latency histograms (seconds) by the short name the analysis uses: the first
# name a server exports is read (vLLM before 0.11 called inter-token latency
# time_per_output_token, which servers on it still export).
HISTOGRAMS = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
}
QUANTILES = (0.5, 0.95, 0.99)


def parse(text: str, model: str) -> dict:
    """Totals of the counters for `model` (all versions; failures over all reasons) and its
    histograms' cumulative bucket counts (`{"ttft": {upper bound: count}}`)."""
    out: dict = {name: 0.0 for name in COUNTERS.values()}
    found: dict = {}  # histogram name -> {upper bound: count}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("model") != model:
                continue
            # The parser names counter samples `<family>_total`; Triton's names have no suffix.
            key = COUNTERS.get(sample.name) or COUNTERS.get(sample.name.removesuffix("_total"))
            if key:
                out[key] += sample.value
            elif sample.name.endswith("_bucket"):
                buckets = found.setdefault(sample.name.removesuffix("_bucket"), {})
                le = float(sample.labels["le"])
                buckets[le] = buckets.get(le, 0.0) + sample.value
    for key, names in HISTOGRAMS.items():
        out[key] = next((found[name] for name in names if name in found), {})
    return out


def delta(before: dict | None, after: dict | None) -> dict | None:
    """Counter and bucket increase; None when either scrape failed (a failed check, never a pass)."""
    if before is None or after is None:
        return None
    d: dict = {}
    for k, v in after.items():
        if isinstance(v, dict):
            d[k] = {le: n - before.get(k, {}).get(le, 0.0) for le, n in v.items()}
            if any(n < 0 for n in d[k].values()):
                return None
        else:
            d[k] = v - before.get(k, 0.0)
            if d[k] < 0:  # the server restarted: its counters began again
                return None
    d["error_rate"] = d["failure"] / (d["success"] + d["failure"]) if d["success"] + d["failure"] else float("nan")
    d["mean_ms"] = d["duration_us"] / 1000.0 / d["success"] if d["success"] else float("nan")
    return d


def histogram_quantile(q: float, buckets: dict[float, float]) -> float:
    """PromQL's rule on cumulative buckets: find the bucket holding rank q*count and
    interpolate linearly inside it (the first bucket starts at 0; a rank in +Inf gives the
    highest finite bound); NaN without observations."""
    bounds = sorted(buckets)
    if not bounds or bounds[-1] != math.inf or buckets[math.inf] <= 0:
        return math.nan
    rank = q * buckets[math.inf]
    lower, below = 0.0, 0.0
    for le in bounds:
        count = buckets[le]
        if count >= rank:
            if le == math.inf:
                return bounds[-2] if len(bounds) > 1 else math.nan
            if count == below:
                return le
            return lower + (le - lower) * (rank - below) / (count - below)
        lower, below = le, count
    return math.nan


def token_latency(d: dict | None) -> dict | None:
    """Quantiles (ms) and observation counts of time to first token and inter-token
    latency from a delta's histograms; None when there is no delta."""
    if d is None:
        return None
    out = {}
    for key in HISTOGRAMS:
        buckets = d.get(key) or {}
        out[key] = {
            "observations": int(buckets.get(math.inf, 0)),
            **{f"p{round(q * 100)}_ms": histogram_quantile(q, buckets) * 1000.0 for q in QUANTILES},
        }
    return out
