"""The blessing gate, with TFX Evaluator semantics: inclusive value bounds; change
thresholds against the baseline (absolute: candidate - baseline, relative: that over the
baseline, signed by direction); a missing or NaN metric fails; with no baseline the
change checks are skipped and say so."""

from __future__ import annotations

import math

from kfp_llmops.components.common.gates import Check

from .config import GateConfig


def _number(metrics: dict, name: str) -> float | None:
    value = metrics.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def evaluate_gate(metrics: dict, gate: GateConfig, baseline: dict | None) -> tuple[bool, list[Check]]:
    checks: list[Check] = []
    for name, bound in gate.value.items():
        value = _number(metrics, name)
        text = " and ".join(
            p
            for p in (
                f">= {bound.lower:g}" if bound.lower is not None else "",
                f"<= {bound.upper:g}" if bound.upper is not None else "",
            )
            if p
        )
        if value is None:
            checks.append(Check(name, None, text, "fail", "metric missing or NaN"))
            continue
        ok = (bound.lower is None or _at_least(value, bound.lower)) and (
            bound.upper is None or _at_least(bound.upper, value)
        )
        checks.append(Check(name, value, text, "pass" if ok else "fail"))
    for name, change in gate.change.items():
        value = _number(metrics, name)
        if baseline is None:
            checks.append(Check(name, value, _change_text(change), "skipped", "no baseline", "change"))
            continue
        base = _number(baseline, name)
        if value is None or base is None:
            missing = "candidate" if value is None else "baseline"
            checks.append(
                Check(name, value, _change_text(change), "fail", f"{missing} metric missing or NaN", "change", base)
            )
            continue
        sign = 1.0 if change.direction == "higher_is_better" else -1.0
        ok, reasons = True, []
        if change.absolute is not None:
            delta = value - base
            passed = _at_least(sign * delta, sign * change.absolute)
            ok &= passed
            reasons.append(f"delta {delta:+.4g}")
        if change.relative is not None:
            if base == 0:
                ok, passed = False, False
                reasons.append("relative change undefined (baseline is 0)")
            else:
                rel = (value - base) / abs(base)
                passed = _at_least(sign * rel, sign * change.relative)
                ok &= passed
                reasons.append(f"relative {rel:+.2%}")
        checks.append(
            Check(name, value, _change_text(change), "pass" if ok else "fail", ", ".join(reasons), "change", base)
        )
    blessed = all(c.passed for c in checks)
    return blessed, checks


def _at_least(a: float, b: float) -> bool:
    """a >= b, inclusive through float rounding (0.78 - 0.80 is -0.020000000000000018)."""
    return a >= b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _change_text(change) -> str:
    op = ">=" if change.direction == "higher_is_better" else "<="
    parts = []
    if change.absolute is not None:
        parts.append(f"delta {op} {change.absolute:+g}")
    if change.relative is not None:
        parts.append(f"relative {op} {change.relative:+.0%}")
    return " and ".join(parts)
