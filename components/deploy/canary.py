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
    return _Rollout(target, cfg, info, _watermark(info, key, tokenizer), tokenizer, log, guard).run(before_interval)


ROLES = ("stable", "canary")


class _Rollout:
    """One rollout: the record it fills, the clock its times are read on, its steps."""

    def __init__(self, target, cfg: DeployConfig, info: dict, watermark, tokenizer, log, guard):
        self.target, self.cfg, self.info = target, cfg, info
        self.watermark, self.tokenizer, self.log, self.guard = watermark, tokenizer, log, guard
        self.record: dict = {
            "decision": None,
            "reason": "",
            "intervals": [],
            "smoke": [],
            "interface": [],
            "requests": [],
            "first_release": target.stable is None,
        }
        self.relative = True  # a stable model to compare with
        self.t0 = time.monotonic()

    def run(self, before_interval) -> dict:
        from .serving_state import kill_point

        target, cfg = self.target, self.cfg
        shapes = target.interfaces()
        if shapes is not None:
            breaking = self._breaking(shapes)
            if breaking and not cfg.allow_breaking_change:
                return self._rollback("breaking interface change, blocked before any traffic moved: " + breaking)
        kill_point("before_traffic")
        self.relative = shapes is not None
        steps = cfg.steps if self.relative else [100]  # first release: nothing to compare with
        decider = Decider(cfg if steps == cfg.steps else cfg.model_copy(update={"steps": steps}))
        n = 0
        while True:
            percent = decider.percent
            if before_interval is not None:
                before_interval(n, target)
            if target.canary_alive() is False:
                return self._rollback(f"canary server down at {percent} % (interval {n})")
            if target.stable_alive() is False:
                return self._stable_down(percent, n)
            self.guard()
            target.set_canary_percent(percent)
            self.log(f"[deploy] interval {n}: {percent} % to canary")
            action, why = self._interval(n, percent, decider)
            if action == "rollback":
                return self._rollback(f"{why} at {percent} %")
            if action == "promote" and target.stable_alive() is False:
                return self._stable_down(percent, n)
            if action == "promote":
                self.guard()
                target.promote(self.info)
                return self._finish("promoted", f"all {len(steps)} steps passed")
            n += 1

    def _finish(self, decision: str, reason: str) -> dict:
        self.record.update(decision=decision, reason=reason, seconds=round(time.monotonic() - self.t0, 3))
        self.log(f"[deploy] {decision}: {reason}")
        return self.record

    def _rollback(self, reason: str) -> dict:
        self.record["rollback"] = self.target.rollback()
        return self._finish("rolled_back", reason)

    def _stable_down(self, percent: int, n: int) -> dict:
        return self._rollback(
            f"stable server down at {percent} % (interval {n}): the canary is not "
            "promoted over a model it could not be compared with"
        )

    def _breaking(self, shapes) -> str:
        """The interface differences, recorded; the breaking ones named."""
        diffs = interface.compare(*shapes)
        self.record["interface"] = diffs
        return "; ".join(d["what"] for d in diffs if d["breaking"])

    def _interval(self, n: int, percent: int, decider: Decider) -> tuple[str, str]:
        """Smoke tests, then an interval of load judged on both sides: (action, why)."""
        target = self.target
        smoke_result = target.smoke(self.watermark, self.tokenizer)
        self.record["smoke"].append(
            {"interval": n, "percent": percent, **{k: smoke_result[k] for k in ("passed", "checks")}}
        )
        decider.new_interval()
        before = {r: target.scrape(r) for r in ROLES}
        offset = time.monotonic() - self.t0
        samples = self._load(n, percent, decider)
        after = {r: target.scrape(r) for r in ROLES}
        deltas = {r: prom.delta(before[r], after[r]) for r in ROLES}
        seconds = time.monotonic() - self.t0 - offset
        tokens = {r: target.token_latency(r, deltas[r], seconds) for r in ROLES}
        canary = role_stats(samples, "canary", deltas["canary"], tokens["canary"])
        stable = role_stats(samples, "stable", deltas["stable"], tokens["stable"])
        checks = self._checks(canary, stable, deltas["canary"] is not None, smoke_result, decider)
        fired = decider.fired
        action = "rollback" if fired else decider.end_interval(checks)
        self.record["intervals"].append(
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
        self.record["requests"].extend({**s.to_json(), "t": round(s.t + offset, 4), "interval": n} for s in samples)
        failed = [c.metric for c in checks if not c.passed]
        self.log(
            f"[deploy]   canary {canary.requests} req, errors {canary.error_rate:.3f}, p99 {canary.p99_ms:.0f} ms, "
            f"TTFT p50 {canary.ttft_p50_ms:.0f} ms, ITL p50 {canary.itl_p50_ms:.1f} ms; stable {stable.requests} req, "
            f"p99 {stable.p99_ms:.0f} ms, TTFT p50 {stable.ttft_p50_ms:.0f} ms, ITL p50 {stable.itl_p50_ms:.1f} ms "
            f"-> {action}" + (f" (failed: {', '.join(failed)})" if failed else "")
        )
        why = (
            f"sequential test on {fired.describe()}"
            if fired
            else f"{decider.failed} failed checks (threshold {self.cfg.gate.threshold}): {', '.join(failed)}"
        )
        return action, why

    def _load(self, n: int, percent: int, decider: Decider) -> list:
        """One interval's requests, each observed by the sequential test as it lands. Too few
        canary requests extend the interval (bounded), where responses can be attributed."""
        from .serving_state import kill_point

        seen = [0]

        def observe(s) -> bool:
            seen[0] += s.backend == "canary"
            if n == 0 and seen[0] == 3:
                kill_point("mid_interval")
            return decider.observe(s.backend, s.ok, s.latency_ms)

        return self.target.load().run(
            self.cfg.interval_s,
            on_sample=observe,
            desc=f"interval {n} ({percent} % canary)",
            enough=lambda: seen[0] >= self.cfg.gate.min_requests,
            max_duration=self.cfg.max_interval_s if self.target.attributes else None,
        )

    def _checks(self, canary, stable, metrics_ok: bool, smoke_result: dict, decider: Decider) -> list:
        cfg = self.cfg
        checks = interval_checks(canary, stable, cfg, metrics_ok=metrics_ok, relative=self.relative)
        checks += token_checks(canary, stable if self.relative else None, cfg)
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
        return checks
