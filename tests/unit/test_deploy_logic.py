"""The deploy stage's pure parts: analysis checks, the sequential test's false-rollback
bound, the decision state machine, interface diffs, Prometheus parsing, nginx weights,
the Triton config, and the cluster manifests validated against the official CRDs."""

import copy
import math
import os
import random

import jsonschema
import pytest

from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.deploy import DeployConfig, interface, metrics
from kfp_llmops.components.deploy.analysis import Decider, RoleStats, Sprt, interval_checks, role_stats
from kfp_llmops.components.deploy.cluster import render_httproute, render_inference_service, rollout_manifests
from kfp_llmops.components.deploy.loadgen import Sample
from kfp_llmops.components.deploy.nginx_split import upstream_lines
from kfp_llmops.components.deploy.repository import render_config
from strict_schema import validate as strict

SCHEMAS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "schemas")
ROOT = "ab" * 32


def _stats(requests=100, error_rate=0.0, p99=50.0) -> RoleStats:
    return RoleStats(requests, int(requests * error_rate), error_rate, p99 / 2, p99 * 0.9, p99, {})


def test_interval_checks_absolute_relative_and_min_traffic():
    cfg = DeployConfig()
    ok = interval_checks(_stats(), _stats(), cfg)
    assert all(c.passed for c in ok)
    names = {c.metric for c in interval_checks(_stats(error_rate=0.05), _stats(), cfg) if not c.passed}
    assert names == {"error_rate", "error_rate_vs_stable"}
    slow = interval_checks(_stats(p99=200.0), _stats(p99=100.0), cfg)
    assert {c.metric for c in slow if not c.passed} == {"p99_vs_stable"}  # inside the absolute SLA
    # 30 requests: their p99 is the slowest one, so p95 is compared (one stall does not decide)
    stall = RoleStats(30, 0, 0.0, 10.0, 12.0, 49.0, {})
    assert all(c.passed for c in interval_checks(stall, RoleStats(30, 0, 0.0, 10.0, 12.0, 26.0, {}), cfg))
    slow30 = interval_checks(
        RoleStats(30, 0, 0.0, 20.0, 24.0, 49.0, {}), RoleStats(30, 0, 0.0, 10.0, 12.0, 26.0, {}), cfg
    )
    assert [(c.metric, c.reason) for c in slow30 if not c.passed] == [
        ("p95_vs_stable", "p95: 30 requests (a p99 needs 100)")
    ]
    few = interval_checks(_stats(requests=3), _stats(), cfg)  # the interval already waited its bound
    assert all(c.passed for c in few) and "only 3 of 20" in few[0].reason
    none = interval_checks(_stats(requests=0), _stats(), cfg)
    assert [c.metric for c in none if not c.passed] == ["canary_requests"]  # no traffic is never a pass
    server = interval_checks(
        RoleStats(100, 0, 0.0, 10, 20, 30, {"mean_ms": 40.0}),
        RoleStats(100, 0, 0.0, 10, 20, 30, {"mean_ms": 20.0}),
        cfg,
    )
    assert [c.metric for c in server if not c.passed] == ["server_latency_vs_stable"]  # Triton's duration counters
    dead = interval_checks(_stats(requests=0), _stats(), cfg, metrics_ok=False)
    assert {c.metric for c in dead if not c.passed} == {"canary_requests", "canary_metrics"}


def test_role_stats_takes_the_worse_of_client_and_server_error_rates():
    samples = [Sample(i, "canary", True, 10.0 + i, 200) for i in range(50)]
    assert role_stats(samples, "canary").error_rate == 0.0
    server = metrics.delta(
        {"success": 0, "failure": 0, "duration_us": 0, "inferences": 0},
        {"success": 45, "failure": 5, "duration_us": 45000, "inferences": 50},
    )
    assert role_stats(samples, "canary", server).error_rate == pytest.approx(0.1)
    assert role_stats([], "canary", server).requests == 50  # unattributed traffic (KServe)


def test_sprt_false_rollback_rate_is_bounded_and_bad_canaries_are_caught_fast():
    rng = random.Random(7)
    false = 0
    for _ in range(400):
        t = Sprt("errors", 0.01, 0.05, 0.01)
        false += any(t.update(rng.random() < 0.01) for _ in range(2000))
    assert false / 400 <= 0.01 + 0.01  # Ville: <= alpha (+ noise)
    n_needed = []
    for _ in range(100):
        t = Sprt("errors", 0.01, 0.05, 0.01)
        n = 0
        while not t.update(rng.random() < 0.10):
            n += 1
        n_needed.append(n)
    assert sorted(n_needed)[50] < 80


def test_decider_holds_then_rolls_back_at_threshold_and_promotes_after_last_step():
    cfg = DeployConfig.load("steps: [10, 50, 100]\nthreshold: 2\n")
    d = Decider(cfg)
    good = interval_checks(_stats(), _stats(), cfg)
    bad = interval_checks(_stats(error_rate=0.2), _stats(), cfg)
    assert [d.end_interval(good), d.percent] == ["advance", 50]
    assert [d.end_interval(bad), d.percent] == ["hold", 50]
    assert d.end_interval(good) == "advance" and d.end_interval(good) == "promote"
    d2 = Decider(cfg)
    assert d2.end_interval(bad) == "hold" and d2.end_interval(bad) == "rollback"
    d3 = Decider(cfg)
    assert not any(d3.observe("stable", True, 40.0) for _ in range(50))
    assert any(d3.observe("canary", False, 40.0) for _ in range(30))  # errors fire the SPRT
    assert d3.fired.name == "errors"


def test_decider_sequential_test_on_latency_relative_to_stable():
    d = Decider(DeployConfig())
    for _ in range(100):
        d.observe("stable", True, 50.0)
    assert not any(d.observe("canary", True, 52.0) for _ in range(200))  # within tolerance
    assert any(d.observe("canary", True, 200.0) for _ in range(40))
    assert d.fired.name == "slow requests"


def test_config_rejects_bad_steps_and_names_the_field():
    with pytest.raises(InputError, match="steps"):
        DeployConfig.load("steps: [50, 25, 100]\n")
    with pytest.raises(InputError, match="<inline config>:2: gate.max_error_rate"):
        DeployConfig.load("interval_s: 3\ngate: {max_error_rate: 2}\n")


def test_interface_compare_flags_only_breaking_changes():
    meta = {
        "inputs": [
            {"name": "text_input", "datatype": "BYTES", "shape": [-1, 1]},
            {"name": "seed", "datatype": "INT64", "shape": [-1, 1]},
        ],
        "outputs": [{"name": "text_output", "datatype": "BYTES", "shape": [-1, 1]}],
    }
    conf = {"max_batch_size": 8, "input": [{"name": "seed", "optional": True}]}
    assert interface.compare(meta, conf, meta, conf) == []
    added = copy.deepcopy(meta)
    added["inputs"].append({"name": "top_p", "datatype": "FP32", "shape": [-1, 1]})
    optional = copy.deepcopy(conf)
    optional["input"].append({"name": "top_p", "optional": True})
    assert [d["breaking"] for d in interface.compare(meta, conf, added, optional)] == [False]
    assert [d["breaking"] for d in interface.compare(meta, conf, added, conf)] == [True]
    changed = copy.deepcopy(meta)
    changed["outputs"][0]["datatype"] = "FP32"
    del changed["inputs"][1]
    diffs = interface.compare(meta, conf, changed, conf)
    assert {d["what"] for d in diffs} == {"input 'seed' removed", "output 'text_output' datatype BYTES -> FP32"}


def test_metrics_parse_and_delta_from_triton_text():
    text = (
        "# TYPE nv_inference_request_success counter\n"
        'nv_inference_request_success{model="llm",version="2"} 90\n'
        'nv_inference_request_success{model="other",version="1"} 7\n'
        "# TYPE nv_inference_request_failure counter\n"
        'nv_inference_request_failure{model="llm",reason="BACKEND",version="2"} 8\n'
        'nv_inference_request_failure{model="llm",reason="OTHER",version="2"} 2\n'
        "# TYPE nv_inference_request_duration_us counter\n"
        'nv_inference_request_duration_us{model="llm",version="2"} 4500000\n'
    )
    after = metrics.parse(text, "llm")
    assert after["success"] == 90 and after["failure"] == 10
    d = metrics.delta({"success": 40, "failure": 0, "duration_us": 2000000, "inferences": 0}, after)
    assert d["error_rate"] == pytest.approx(10 / 60) and d["mean_ms"] == pytest.approx(50.0)
    assert metrics.delta(None, after) is None
    assert metrics.delta({**after, "success": 1000}, after) is None  # counters reset: no values


def test_nginx_weights_and_first_release():
    assert upstream_lines("a:1", "b:2", 5) == "server a:1 weight=95;\n        server b:2 weight=5;"
    assert "server a:1 weight=1 down;" in upstream_lines("a:1", "b:2", 100)
    assert "server b:2 weight=1 down;" in upstream_lines("a:1", "b:2", 0)
    assert upstream_lines(None, "b:2", 100) == "server b:2;"


def test_triton_config_declares_a_decoupled_model_with_text_or_chat_input_and_batching():
    text = render_config(DeployConfig(), 3)
    assert 'name: "text_input" data_type: TYPE_STRING dims: [ 1 ] optional: true' in text
    assert 'name: "messages" data_type: TYPE_STRING dims: [ 1 ] optional: true' in text
    assert 'name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true' in text
    assert 'name: "max_new_tokens" data_type: TYPE_INT32 dims: [ 1 ] optional: true' in text
    assert "model_transaction_policy { decoupled: true }" in text
    assert "versions: [ 3 ]" in text and "dynamic_batching" in text and "KIND_CPU" in text


def test_a_change_of_transaction_policy_is_breaking():
    meta = {
        "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [-1, 1]}],
        "outputs": [{"name": "text_output", "datatype": "BYTES", "shape": [-1, 1]}],
    }
    old, new = {"max_batch_size": 8}, {"max_batch_size": 8, "model_transaction_policy": {"decoupled": True}}
    assert [(d["what"], d["breaking"]) for d in interface.compare(meta, old, meta, new)] == [
        ("decoupled False -> True (clients of /infer break)", True)
    ]
    assert interface.compare(meta, new, meta, new) == []


def _histogram(name: str, counts, labels='model="llm",version="1"') -> str:
    rows = "".join(f'{name}_bucket{{le="{le}",{labels}}} {n}\n' for le, n in counts)
    return f"# TYPE {name} histogram\n{rows}{name}_count{{{labels}}} {counts[-1][1]}\n{name}_sum{{{labels}}} 1.0\n"


def test_histograms_parse_and_quantiles_follow_promql():
    """vLLM's metric names, as both engines export them (serving_metrics)."""

    def text(counts):
        return (
            _histogram("vllm:time_to_first_token_seconds", counts) + "# TYPE vllm:generation_tokens counter\n"
            'vllm:generation_tokens_total{model="llm",version="1"} 50\n'
        )

    before = metrics.parse(text([("0.1", 0), ("0.5", 0), ("+Inf", 0)]), "llm")
    after = metrics.parse(text([("0.1", 10), ("0.5", 30), ("+Inf", 40)]), "llm")
    assert after["ttft"] == {0.1: 10, 0.5: 30, math.inf: 40} and after["generated_tokens"] == 50
    d = metrics.delta(before, after)
    # rank 20 of 40 lies in (0.1, 0.5], 10 of its 20: halfway; rank 38 lies in +Inf: the last finite bound
    assert metrics.histogram_quantile(0.5, d["ttft"]) == pytest.approx(0.3)
    assert metrics.histogram_quantile(0.95, d["ttft"]) == pytest.approx(0.5)
    assert metrics.histogram_quantile(0.2, d["ttft"]) == pytest.approx(0.08)  # first bucket starts at 0
    lat = metrics.token_latency(d)
    assert lat["ttft"]["observations"] == 40 and lat["ttft"]["p50_ms"] == pytest.approx(300.0)
    assert lat["itl"]["observations"] == 0 and math.isnan(lat["itl"]["p50_ms"])
    assert metrics.delta(after, before) is None  # a restart: no values


def test_inter_token_latency_is_read_under_vllms_older_name_too():
    """A server on an older vLLM exports time_per_output_token; the newer name wins when both are there."""
    old = metrics.parse(_histogram("vllm:time_per_output_token_seconds", [("0.1", 4), ("+Inf", 4)]), "llm")
    assert old["itl"] == {0.1: 4, math.inf: 4}
    both = metrics.parse(
        _histogram("vllm:time_per_output_token_seconds", [("0.1", 4), ("+Inf", 4)])
        + _histogram("vllm:inter_token_latency_seconds", [("0.1", 1), ("+Inf", 2)]),
        "llm",
    )
    assert both["itl"] == {0.1: 1, math.inf: 2}
    other = metrics.parse(_histogram("vllm:inter_token_latency_seconds", [("+Inf", 2)], 'model="other"'), "llm")
    assert other["itl"] == {}


def test_kserve_manifests_validate_against_the_crd_with_unknown_fields_rejected():
    cfg = DeployConfig.load("cluster: {gpus: 1}\n")
    for _label, doc in rollout_manifests(cfg, ROOT):
        strict(doc)
    steps = [doc["spec"]["predictor"].get("canaryTrafficPercent") for _, doc in rollout_manifests(cfg, ROOT)]
    assert steps == [5, 25, 50, None, 0]  # steps, promote, rollback
    doc = render_inference_service(cfg, ROOT, 5)
    assert doc["spec"]["predictor"]["model"]["storageUri"].endswith(ROOT)  # addressed by content
    assert "value" not in str(doc["spec"]["predictor"]["volumes"])  # Secret reference, no value
    bad = copy.deepcopy(doc)
    bad["spec"]["predictor"]["canaryTrafficPercent"] = "five"
    with pytest.raises(jsonschema.ValidationError):
        strict(bad)
    bad = copy.deepcopy(doc)
    bad["spec"]["predictor"]["canaryPercent"] = 5  # a field KServe does not have
    with pytest.raises(jsonschema.ValidationError):
        strict(bad)


def test_gateway_httproute_manifests_validate_against_the_crd_with_unknown_fields_rejected():
    cfg = DeployConfig.load("target: gateway\n")
    for _, doc in rollout_manifests(cfg, ROOT):
        strict(doc)
    (rule,) = render_httproute(cfg, 25)["spec"]["rules"]  # one rule: no header picks a side
    assert [b["weight"] for b in rule["backendRefs"]] == [75, 25]
    paths = [m["path"] for m in rule["matches"]]
    assert {p["type"] for p in paths} == {"Exact"} and "headers" not in str(rule)
    assert [p["value"] for p in paths] == [
        "/v2/health/ready",
        "/v2/models/llm",
        "/v2/models/llm/ready",
        "/v2/models/llm/generate",
        "/v2/models/llm/generate_stream",
        "/v1/chat/completions",  # the front doors answer the OpenAI API
        "/v1/completions",
        "/v1/models",
    ]
    bad = render_httproute(cfg, 25)
    bad["spec"]["rules"][0]["backendRefs"][0]["weight"] = -1
    with pytest.raises(jsonschema.ValidationError):
        strict(bad)
