"""Triton's Prometheus counters for one model, parsed with prometheus_client's parser,
and their change over an analysis interval."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

COUNTERS = {"nv_inference_request_success": "success", "nv_inference_request_failure": "failure",
            "nv_inference_request_duration_us": "duration_us", "nv_inference_count": "inferences"}


def parse(text: str, model: str) -> dict[str, float]:
    """Totals of the counters for `model` (all versions; failures over all reasons)."""
    out = {name: 0.0 for name in COUNTERS.values()}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # The parser names counter samples `<family>_total`; Triton's names have no suffix.
            key = COUNTERS.get(sample.name.removesuffix("_total"))
            if key and sample.labels.get("model") == model:
                out[key] += sample.value
    return out


def delta(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float] | None:
    """Counter increase; None when either scrape failed (a failed check, never a pass)."""
    if before is None or after is None:
        return None
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    if any(v < 0 for v in d.values()):      # the server restarted: its counters began again
        return None
    d["error_rate"] = d["failure"] / (d["success"] + d["failure"]) if d["success"] + d["failure"] else float("nan")
    d["mean_ms"] = d["duration_us"] / 1000.0 / d["success"] if d["success"] else float("nan")
    return d
