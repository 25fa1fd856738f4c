"""Deploy benchmark.

1. Recorded traces: real requests through nginx to a real stable and a real canary
   (healthy, failing 10 % of requests, +60 ms and +20 ms per request) at a 50 % split.
2. >= 100 simulated rollouts per kind, resampled from those traces, decided two ways on
   the same request streams: this project's analysis (absolute + relative-to-stable
   checks, minimum traffic, sequential tests) and Flagger's fixed rule (absolute checks
   at the end of each interval, rollback after `threshold` failed intervals). Reports
   detection rate, time and canary requests until rollback, and false rollbacks.
3. Latency the nginx split adds over calling Triton directly.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile

from kfp_llmops.components.deploy import DeployConfig, build_repository
from kfp_llmops.components.deploy.analysis import Decider, interval_checks, role_stats
from kfp_llmops.components.deploy.loadgen import LoadGenerator, Sample
from kfp_llmops.components.deploy.local_target import LocalTarget
from tests.helpers import tiny_model

KINDS = {
    "healthy": {},
    "errors_10pct": {"failure_rate": 0.10},
    "latency_+60ms": {"added_latency_ms": 60.0},
    "latency_+20ms": {"added_latency_ms": 20.0},
}


def record_traces(root: str, seconds: float) -> tuple[dict, dict]:
    """Per kind: the canary's and stable's (ok, latency) at 50 %; plus the nginx overhead."""
    _, _, model, model_root = tiny_model(root)
    base = DeployConfig.load("watermark: {enabled: false}\n")
    state = os.path.join(root, "state")
    traces, overhead = {}, {}
    for i, (kind, drill) in enumerate([("stable", {})] + list(KINDS.items())):
        cfg = base.model_copy(update={"drill": base.drill.model_copy(update=drill)})
        repo = os.path.join(root, f"repo-{i}")
        built = build_repository(model, model_root, repo, cfg, state)
        target = LocalTarget(cfg, state, os.path.join(root, f"work-{i}"))
        try:
            target.start(repo)
            if kind == "stable":  # the first release becomes the stable every canary meets
                target.promote(built)
                continue
            if kind == "healthy":
                overhead = nginx_overhead(target)
            target.set_canary_percent(50)
            samples = target.load().run(seconds, desc=f"trace {kind}")
        finally:
            target.close()
        traces[kind] = {
            "rate": len(samples) / seconds,
            "canary": [(s.ok, s.latency_ms) for s in samples if s.backend == "canary"],
            "stable": [(s.ok, s.latency_ms) for s in samples if s.backend == "stable"],
        }
    return traces, overhead


def nginx_overhead(target, n: int = 300) -> dict:
    """One client, same request: directly to stable vs through nginx pinned to stable."""
    host, port = target.stable.address.split(":")
    direct = LoadGenerator(host, int(port), "llm", {}, ["hi"], 1, 1)
    proxied = LoadGenerator(
        target.split.host,
        target.split.port,
        "llm",
        {},
        ["hi"],
        1,
        1,
        headers={"X-Canary": "never", **target.split.operator_headers},
    )
    out = {}
    for _ in range(2):  # interleave twice against drift, keep the better of each
        for name, gen in (("direct", direct), ("nginx", proxied)):
            lat = []
            gen.run(1.0, on_sample=lambda s, lat=lat: lat.append(s.latency_ms) or len(lat) >= n, desc=name)
            med = statistics.median(lat)
            out[name] = min(out.get(name, med), med)
    out["added_ms"] = out["nginx"] - out["direct"]
    return out


def simulate(trace: dict, cfg: DeployConfig, flagger: bool, rng: random.Random) -> dict:
    """One rollout over a request stream resampled from the trace."""
    d = Decider(cfg, sequential=not flagger, relative=not flagger)
    rate = trace["rate"]
    t, canary_seen, canary_failed = 0.0, 0, 0
    while True:
        pct = d.percent
        d.new_interval()
        samples = []
        fired = False
        for _ in range(int(rate * cfg.interval_s)):
            t += 1.0 / rate
            role = "canary" if rng.random() < pct / 100 else "stable"
            ok, lat = rng.choice(trace[role])
            samples.append(Sample(t, role, ok, lat, 200 if ok else 400))
            if role == "canary":
                canary_seen += 1
                canary_failed += not ok
            if d.observe(role, ok, lat):
                fired = True
                break
        if fired:
            return {"decision": "rolled_back", "t": t, "canary_requests": canary_seen, "canary_failed": canary_failed}
        canary, stable = role_stats(samples, "canary"), role_stats(samples, "stable")
        action = d.end_interval(interval_checks(canary, stable, cfg, relative=not flagger))
        if action in ("rollback", "promote"):
            return {
                "decision": "rolled_back" if action == "rollback" else "promoted",
                "t": t,
                "canary_requests": canary_seen,
                "canary_failed": canary_failed,
            }


def _sla_from(traces: dict) -> str:
    """A loose absolute p99 bound, as SLAs usually are: 3x stable's observed p99. A canary
    much slower than stable but inside it is what checks relative to stable are for."""
    lat = sorted(lat for ok, lat in traces["healthy"]["stable"] if ok)
    p99 = lat[int(0.99 * (len(lat) - 1))]
    return f"gate: {{max_p99_ms: {round(p99 * 3, 1)}}}\n"


def main(seconds: float = 8.0, rollouts: int = 200) -> dict:
    with tempfile.TemporaryDirectory() as root:
        traces, overhead = record_traces(root, seconds)
    cfg = DeployConfig.load(_sla_from(traces))
    out = {
        "rollouts_per_kind": rollouts,
        "interval_s": cfg.interval_s,
        "threshold": cfg.gate.threshold,
        "steps": cfg.steps,
        "max_p99_ms": cfg.gate.max_p99_ms,
        "nginx": overhead,
        "kinds": {},
    }
    for kind, trace in traces.items():
        row = {"trace_requests": len(trace["canary"]) + len(trace["stable"]), "rate_rps": round(trace["rate"], 1)}
        for method in ("llmops", "flagger"):
            rng = random.Random(1)
            runs = [simulate(trace, cfg, method == "flagger", rng) for _ in range(rollouts)]
            rolled = [r for r in runs if r["decision"] == "rolled_back"]
            row[method] = {
                "rollback_rate": len(rolled) / rollouts,
                "median_s_to_rollback": statistics.median(r["t"] for r in rolled) if rolled else None,
                "median_canary_requests": statistics.median(r["canary_requests"] for r in rolled) if rolled else None,
                "median_failed_canary_requests": statistics.median(r["canary_failed"] for r in rolled)
                if rolled
                else None,
            }
        out["kinds"][kind] = row
    return out


def report(r: dict) -> str:
    lines = [
        f"== deploy: {r['rollouts_per_kind']} simulated rollouts per kind from recorded traces "
        f"(steps {r['steps']}, interval {r['interval_s']} s, threshold {r['threshold']}, "
        f"p99 SLA {r['max_p99_ms']} ms)"
    ]
    for kind, row in r["kinds"].items():
        for method in ("llmops", "flagger"):
            m = row[method]
            what = "false rollbacks" if kind == "healthy" else "detected"
            s = f"{m['median_s_to_rollback']:.1f} s" if m["median_s_to_rollback"] is not None else "-"
            c = m["median_canary_requests"] if m["median_canary_requests"] is not None else "-"
            lines.append(
                f"{kind:<15} {method:<8} {what} {m['rollback_rate']:.1%}  median time to rollback {s}, "
                f"canary requests {c}, failed "
                f"{m['median_failed_canary_requests'] if m['median_failed_canary_requests'] is not None else '-'}"
            )
    n = r["nginx"]
    if n:
        lines.append(
            f"nginx split: median {n['nginx']:.2f} ms vs direct {n['direct']:.2f} ms "
            f"({n['added_ms']:+.2f} ms per request)"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    res = main()
    print(report(res))
