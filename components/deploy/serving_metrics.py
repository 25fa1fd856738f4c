"""What the served model exports beside Triton's own counters, under the names vLLM's
servers use, so dashboards and the canary's PromQL read either engine the same way:
time to first token, inter-token latency, end-to-end latency and queue time (histograms,
seconds), running and waiting requests (gauges), prompt and generated tokens (counters),
each labelled with the model and version (Triton's vLLM backend's labels).

Built from the python backend's metric API (`pb_utils`, given by the caller): only the
Triton model imports this module."""

from __future__ import annotations

TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
E2E = "vllm:e2e_request_latency_seconds"
QUEUE = "vllm:request_queue_time_seconds"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"

# vLLM's own bucket bounds for these histograms (vllm/v1/metrics/loggers.py), inter-token
# latency's with three below its first (10 ms): small models on CPUs step faster than that,
# and a quantile inside the first bucket is only an interpolation from 0.
_LATENCY = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0]
_TOKEN = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5]
_TOKEN += [10.0, 20.0, 40.0, 80.0]
_REQUEST = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0]

HISTOGRAMS = {
    TTFT: ("Time from a request's arrival to its first generated token.", _LATENCY),
    ITL: ("Time between successive tokens of one answer.", _TOKEN),
    E2E: ("Time from a request's arrival to its last token.", _REQUEST),
    QUEUE: ("Time a request waited before the engine scheduled it.", _REQUEST),
}
GAUGES = {RUNNING: "Requests the engine is generating for.", WAITING: "Requests waiting to be scheduled."}
COUNTERS = {PROMPT_TOKENS: "Prompt tokens read.", GENERATION_TOKENS: "Tokens generated."}


class ServingMetrics:
    """One metric per family for this model and version; `observe`, `add` and `set` by
    the family's name. The families are kept: a metric must not outlive its family."""

    def __init__(self, pb_utils, model: str, version: str):
        labels = {"model": model, "version": str(version)}
        family = pb_utils.MetricFamily
        self.families = {}
        self.metrics = {}
        for name, (doc, buckets) in HISTOGRAMS.items():
            self.families[name] = family(name, doc, family.HISTOGRAM)
            self.metrics[name] = self.families[name].Metric(labels=labels, buckets=buckets)
        for kinds, kind in ((GAUGES, family.GAUGE), (COUNTERS, family.COUNTER)):
            for name, doc in kinds.items():
                self.families[name] = family(name, doc, kind)
                self.metrics[name] = self.families[name].Metric(labels=labels)

    def observe(self, name: str, seconds: float) -> None:
        self.metrics[name].observe(seconds)

    def add(self, name: str, n: float) -> None:
        if n:
            self.metrics[name].increment(n)

    def set(self, name: str, value: float) -> None:
        self.metrics[name].set(value)
