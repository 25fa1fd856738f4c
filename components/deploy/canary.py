"""The progressive rollout: interface check, smoke tests, traffic steps with analysis
intervals, then promote or roll back. Works on any target with the LocalTarget's methods."""

from __future__ import annotations

import time
from collections.abc import Callable

from kfp_llmops.components.common import gates

from . import interface
from . import metrics as prom
from .analysis import Decider, interval_checks, role_stats, token_checks
from .config import DeployConfig


def _watermark(info: dict, key: int | None, tokenizer):
    """The smoke tests' detector, with the parameters the served model itself reads."""
    mark = info["settings"]["watermark"]
    if not mark["enabled"] or key is None or tokenizer is None:
        return None
    from kfp_llmops.components.common.watermark.params import KGW

    return KGW.parse(mark["kgw"], f"{info['weights']}/../serving.json").watermark(key, len(tokenizer))


def rollout(
    target,
    cfg: DeployConfig,
    info: dict,
    key: int | None = None,
    tokenizer=None,
    before_interval: Callable[[int, object], None] | None = None,
    log=print,
    guard: Callable[[], None] = lambda: None,
) -> dict:
    """Run the canary on a started target; returns the record (decision, intervals, requests).
    `guard` raises once this rollout no longer owns the model (its Lease was lost): it is
    called before every change to what serves."""
    record: dict = {
        "decision": None,
        "reason": "",
        "intervals": [],
        "smoke": [],
        "interface": [],
        "requests": [],
        "first_release": target.stable is None,
    }
    watermark = _watermark(info, key, tokenizer)
    t0 = time.monotonic()

    def finish(decision: str, reason: str) -> dict:
        record.update(decision=decision, reason=reason, seconds=round(time.monotonic() - t0, 3))
        log(f"[deploy] {decision}: {reason}")
        return record

    def stable_down(percent: int, n: int) -> dict:
        record["rollback"] = target.rollback()
        return finish(
            "rolled_back",
            f"stable server down at {percent} % (interval {n}): the canary is not "
            "promoted over a model it could not be compared with",
        )

    shapes = target.interfaces()
    if shapes is not None:
        diffs = interface.compare(*shapes)
        record["interface"] = diffs
        breaking = [d["what"] for d in diffs if d["breaking"]]
        if breaking and not cfg.allow_breaking_change:
            record["rollback"] = target.rollback()
            return finish(
                "rolled_back", "breaking interface change, blocked before any traffic moved: " + "; ".join(breaking)
            )

    from .serving_state import kill_point

    kill_point("before_traffic")
    steps = cfg.steps if shapes is not None else [100]  # first release: nothing to compare with
    decider = Decider(cfg if steps == cfg.steps else cfg.model_copy(update={"steps": steps}))
    n = 0
    while True:
        percent = decider.percent
        if before_interval is not None:
            before_interval(n, target)
        alive = target.canary_alive()
        if alive is False:
            record["rollback"] = target.rollback()
            return finish("rolled_back", f"canary server down at {percent} % (interval {n})")
        if target.stable_alive() is False:
            return stable_down(percent, n)
        guard()
        target.set_canary_percent(percent)
        log(f"[deploy] interval {n}: {percent} % to canary")
        smoke_result = target.smoke(watermark, tokenizer)
        record["smoke"].append(
            {"interval": n, "percent": percent, **{k: smoke_result[k] for k in ("passed", "checks")}}
        )
        decider.new_interval()
        before = {r: target.scrape(r) for r in ("stable", "canary")}
        offset = time.monotonic() - t0
        seen = [0]

        def observe(s, seen=seen, n=n) -> bool:
            seen[0] += s.backend == "canary"
            if n == 0 and seen[0] == 3:
                kill_point("mid_interval")
            return decider.observe(s.backend, s.ok, s.latency_ms)

        # Too few canary requests extend the interval (bounded), where responses can be attributed.
        samples = target.load().run(
            cfg.interval_s,
            on_sample=observe,
            desc=f"interval {n} ({percent} % canary)",
            enough=lambda seen=seen: seen[0] >= cfg.gate.min_requests,
            max_duration=cfg.max_interval_s if target.attributes else None,
        )
        after = {r: target.scrape(r) for r in ("stable", "canary")}
        deltas = {r: prom.delta(before[r], after[r]) for r in before}
        seconds = time.monotonic() - t0 - offset
        tokens = {r: target.token_latency(r, deltas[r], seconds) for r in before}
        canary = role_stats(samples, "canary", deltas["canary"], tokens["canary"])
        stable = role_stats(samples, "stable", deltas["stable"], tokens["stable"])
        checks = interval_checks(
            canary, stable, cfg, metrics_ok=deltas["canary"] is not None, relative=shapes is not None
        )
        checks += token_checks(canary, stable if shapes is not None else None, cfg)
        checks.append(
            gates.holds(
                "smoke",
                smoke_result["passed"],
                "; ".join(f"{c['metric']}: {c['reason']}" for c in smoke_result["checks"] if c["verdict"] == "fail"),
            )
        )
        fired = decider.fired
        if fired:
            checks.append(
                gates.holds(
                    "sequential", False, fired.describe(), value=round(fired.llr, 3), bound=f"< {fired.threshold:.3f}"
                )
            )
        action = "rollback" if fired else decider.end_interval(checks)
        record["intervals"].append(
            {
                "interval": n,
                "percent": percent,
                "start_s": round(offset, 3),
                "seconds": round(max((s.t for s in samples), default=0.0), 3),
                "canary": canary.to_json(),
                "stable": stable.to_json(),
                "checks": [c.to_json() for c in checks],
                "action": action,
                "failed_checks": decider.failed,
            }
        )
        record["requests"].extend({**s.to_json(), "t": round(s.t + offset, 4), "interval": n} for s in samples)
        failed = [c.metric for c in checks if not c.passed]
        log(
            f"[deploy]   canary {canary.requests} req, errors {canary.error_rate:.3f}, p99 {canary.p99_ms:.0f} ms, "
            f"TTFT p50 {canary.ttft_p50_ms:.0f} ms, ITL p50 {canary.itl_p50_ms:.1f} ms; stable {stable.requests} req, "
            f"p99 {stable.p99_ms:.0f} ms, TTFT p50 {stable.ttft_p50_ms:.0f} ms, ITL p50 {stable.itl_p50_ms:.1f} ms "
            f"-> {action}" + (f" (failed: {', '.join(failed)})" if failed else "")
        )
        if action == "rollback":
            record["rollback"] = target.rollback()
            why = (
                f"sequential test on {fired.describe()}"
                if fired
                else f"{decider.failed} failed checks (threshold {cfg.gate.threshold}): {', '.join(failed)}"
            )
            return finish("rolled_back", f"{why} at {percent} %")
        if action == "promote" and target.stable_alive() is False:
            return stable_down(percent, n)
        if action == "promote":
            guard()
            target.promote(info)
            return finish("promoted", f"all {len(steps)} steps passed")
        n += 1
