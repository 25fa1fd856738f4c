"""Canary analysis, independent of where the numbers come from (real servers or recorded
traces): per-interval checks against absolute SLA bounds and relative to stable, a
minimum-traffic rule, Flagger's failed-check threshold, and a sequential test.

The sequential tests are Wald's likelihood ratios on single canary requests: one on
"failed", one on "slower than stable's p95 by more than the latency tolerance". Under a
healthy canary each ratio is a nonnegative martingale, so by Ville's inequality the
chance it ever reaches 2/alpha -- over the whole rollout, however often it is looked
at -- is at most alpha/2: a bounded false-rollback rate, with a bad canary caught within
a few dozen of its requests instead of after `gate.threshold` full intervals.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from kfp_llmops.components.common import gates

from .config import DeployConfig


@dataclass
class RoleStats:
    requests: int
    errors: int
    error_rate: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    server: dict | None = None  # Triton counter deltas, None when the scrape failed
    ttft_p50_ms: float = math.nan  # client-side: time to the stream's first piece
    ttft_p95_ms: float = math.nan
    itl_p50_ms: float = math.nan  # client-side: mean gap between a stream's pieces
    tokens: dict | None = None  # the server's TTFT and ITL histograms over the interval (ms quantiles)

    def to_json(self) -> dict:
        return asdict(self)


def _quantile(values: list[float], q: float) -> float:
    return float(np.quantile(np.asarray(values), q)) if values else float("nan")


def role_stats(samples, role: str, server: dict | None = None, tokens: dict | None = None) -> RoleStats:
    """Client view of one role's requests; the error rate is the worse of client and server.
    Where responses cannot be attributed (KServe), the server's counters stand in and its
    mean request duration stands in for the quantiles."""
    mine = [s for s in samples if s.backend == role]
    if not mine and server is not None and server["success"] + server["failure"] > 0:
        m = server["mean_ms"]
        return RoleStats(
            int(server["success"] + server["failure"]),
            int(server["failure"]),
            server["error_rate"],
            m,
            m,
            m,
            server,
            tokens=tokens,
        )
    lat = [s.latency_ms for s in mine if s.ok]
    ttft = [s.ttft_ms for s in mine if s.ok and s.ttft_ms == s.ttft_ms]
    itl = [s.itl_ms for s in mine if s.ok and s.itl_ms == s.itl_ms]
    errors = sum(not s.ok for s in mine)
    rate = errors / len(mine) if mine else float("nan")
    if server is not None and server.get("error_rate") == server.get("error_rate"):
        rate = server["error_rate"] if rate != rate else max(rate, server["error_rate"])
    return RoleStats(
        len(mine),
        errors,
        rate,
        _quantile(lat, 0.5),
        _quantile(lat, 0.95),
        _quantile(lat, 0.99),
        server,
        _quantile(ttft, 0.5),
        _quantile(ttft, 0.95),
        _quantile(itl, 0.5),
        tokens,
    )


def token_checks(canary: RoleStats, stable: RoleStats | None, cfg: DeployConfig) -> list[gates.Check]:
    """Time to first token and inter-token latency from the servers' histograms: the
    canary's against the SLA bounds, and against stable's in the same interval (within
    the latency tolerance, or `token_latency_slack_ms`, whichever allows more)."""
    gate = cfg.gate
    if canary.tokens is None:
        return [gates.holds("token_latency", False, "no token-latency histograms from the canary")]
    checks = []
    for key, bound in (("ttft", gate.max_ttft_ms), ("itl", gate.max_itl_ms)):
        mine = canary.tokens[key]
        if not mine["observations"]:
            checks.append(gates.Check(f"{key}_ms", None, "", "skipped", "no observations"))
            continue
        q = comparable_quantile(mine["observations"])
        checks.append(gates.at_most(f"{key}_{q}_ms", mine[f"{q}_ms"], bound))
        theirs = (stable.tokens or {}).get(key) if stable is not None else None
        if theirs and theirs["observations"]:
            q = comparable_quantile(min(mine["observations"], theirs["observations"]))
            ref = theirs[f"{q}_ms"]
            checks.append(
                gates.at_most(
                    f"{key}_{q}_vs_stable",
                    mine[f"{q}_ms"],
                    max(ref * (1 + gate.latency_tolerance), ref + gate.token_latency_slack_ms),
                )
            )
    return checks


def interval_checks(
    canary: RoleStats, stable: RoleStats | None, cfg: DeployConfig, metrics_ok: bool = True, relative: bool = True
) -> list[gates.Check]:
    gate = cfg.gate
    # No traffic is never a pass; a little (the interval already waited up to max_interval_s
    # for min_requests) is judged on what came, not failed for being little.
    n = canary.requests
    checks = [
        gates.holds(
            "canary_requests",
            n > 0,
            "no canary traffic within the interval"
            if n == 0
            else ""
            if n >= gate.min_requests
            else f"only {n} of {gate.min_requests} canary requests by the bound",
            value=n,
            bound=f">= 1 (waits for {gate.min_requests})",
        )
    ]
    if not metrics_ok:
        checks.append(gates.holds("canary_metrics", False, "no values from the canary's metrics endpoint"))
    if canary.requests == 0:
        return checks
    er, p99 = canary.error_rate, canary.p99_ms
    checks.append(gates.at_most("error_rate", er, gate.max_error_rate))
    checks.append(gates.at_most("p99_ms", p99, gate.max_p99_ms, "" if p99 == p99 else "no successful canary request"))
    if relative:
        if stable is None or stable.requests < gate.min_requests:
            # Latency depends on load: a baseline from another interval (another split) would
            # compare unlike with unlike, so at 100 % only the absolute bounds apply.
            checks.append(gates.Check("vs_stable", None, "", "skipped", "stable not measured in this interval"))
        else:
            checks.append(gates.at_most("error_rate_vs_stable", er, stable.error_rate + gate.error_rate_tolerance))
            fewest = min(canary.requests, stable.requests)
            q = comparable_quantile(fewest)
            checks.append(
                gates.at_most(
                    f"{q}_vs_stable",
                    getattr(canary, f"{q}_ms"),
                    getattr(stable, f"{q}_ms") * (1 + gate.latency_tolerance),
                    "" if q == "p99" else f"{q}: {fewest} requests (a p99 needs 100)",
                )
            )
            mine, theirs = (
                (canary.server or {}).get("mean_ms", math.nan),
                (stable.server or {}).get("mean_ms", math.nan),
            )
            if mine == mine and theirs == theirs:  # Triton's own duration counters, queueing included
                checks.append(gates.at_most("server_latency_vs_stable", mine, theirs * (1 + gate.latency_tolerance)))
    return checks


def comparable_quantile(requests: int) -> str:
    """The highest latency quantile `requests` requests estimate: a p99 of 30 requests is
    their slowest one, and one scheduling hiccup would decide the comparison (the
    sequential test, built for few requests, still judges each one)."""
    return "p99" if requests >= 100 else "p95" if requests >= 20 else "p50"


class Sprt:
    """One-sided sequential probability ratio test on Bernoulli 'bad' outcomes."""

    def __init__(self, name: str, p0: float, p1: float, alpha: float):
        if not p0 < p1:
            raise ValueError(f"sequential: {name} p0 must be below p1")
        self.name = name
        self.up = math.log(p1 / p0)
        self.down = math.log((1 - p1) / (1 - p0))
        self.threshold = math.log(1 / alpha)
        self.llr = 0.0
        self.n = 0
        self.bad = 0

    @property
    def fired(self) -> bool:
        return self.llr >= self.threshold

    def update(self, bad: bool) -> bool:
        self.n += 1
        self.bad += bad
        self.llr += self.up if bad else self.down
        return self.fired

    def describe(self) -> str:
        return f"{self.name}: {self.bad} of {self.n} canary requests"


def latency_bound(stable_latencies: list[float], cfg: DeployConfig) -> float:
    """A canary request slower than this counts as bad for the sequential test."""
    if len(stable_latencies) >= cfg.gate.min_requests:
        return min(cfg.gate.max_p99_ms, _quantile(stable_latencies, 0.95) * (1 + cfg.gate.latency_tolerance))
    return cfg.gate.max_p99_ms


@dataclass
class Decider:
    """The rollout state machine: hold a step on a failed interval, roll back at
    `gate.threshold` failed checks or when the sequential test fires, promote after 100 %."""

    cfg: DeployConfig
    sequential: bool = True
    relative: bool = True
    step: int = 0
    failed: int = 0
    stable_ref: list[float] = field(default_factory=list)  # recent stable latencies
    tests: list[Sprt] = field(default_factory=list)

    def __post_init__(self) -> None:
        s = self.cfg.sequential
        if self.sequential and s.enabled:
            self.tests = [
                Sprt("errors", s.error_p0, s.error_p1, s.alpha / 2),
                Sprt("slow requests", s.slow_p0, s.slow_p1, s.alpha / 2),
            ]

    @property
    def fired(self) -> Sprt | None:
        return next((t for t in self.tests if t.fired), None)

    def new_interval(self) -> None:
        """Stable's latencies are a reference only within the interval they were measured in."""
        self.stable_ref.clear()

    @property
    def percent(self) -> int:
        return self.cfg.steps[self.step]

    def observe(self, backend: str, ok: bool, latency_ms: float) -> bool:
        """Feed one request; True when the sequential test says roll back now."""
        if backend == "stable":
            if ok:
                self.stable_ref.append(latency_ms)
                del self.stable_ref[:-500]
            return False
        if backend != "canary" or not self.tests:
            return False
        errors, slow = self.tests
        errors.update(not ok)
        if ok:
            slow.update(latency_ms > latency_bound(self.stable_ref, self.cfg))
        return self.fired is not None

    def end_interval(self, checks: list[gates.Check]) -> str:
        """advance | hold | rollback | promote."""
        if gates.passed(checks):
            if self.step == len(self.cfg.steps) - 1:
                return "promote"
            self.step += 1
            return "advance"
        self.failed += 1
        return "rollback" if self.failed >= self.cfg.gate.threshold else "hold"
