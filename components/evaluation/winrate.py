"""Win rate against production: the candidate and the model in production answer the
same held-out prompts, a pinned judge decides each pair (`common/judging.py`), and the
gate reads the win rate and its interval."""

from __future__ import annotations

import math

from kfp_llmops.components.common.gates import Check

from .config import GateConfig

KIND = "win rate"


def checks(summary: dict | None, gate: GateConfig, why_not: str) -> list[Check]:
    """The gate's win-rate checks; skipped, saying why, when there is no production model."""
    wanted = [
        (name, bound)
        for name, bound in (("win_rate", gate.min_win_rate), ("win_rate_lower", gate.min_win_rate_lower_bound))
        if bound is not None
    ]
    out = []
    for name, bound in wanted:
        if summary is None:
            out.append(Check(name, None, f">= {bound:g}", "skipped", why_not, KIND))
            continue
        value = summary[name]
        ok = not math.isnan(value) and value >= bound - 1e-12
        out.append(
            Check(
                name,
                value,
                f">= {bound:g}",
                "pass" if ok else "fail",
                f"{summary['wins']} wins, {summary['ties']} ties, {summary['losses']} losses",
                KIND,
            )
        )
    return out


def headline(summary: dict, judge_kind: str, against: str, confidence: float, same_model: bool = False) -> str:
    same = " The candidate is the model in production (the same Merkle root)." if same_model else ""
    return (
        f"Against {against}: {summary['wins']} wins, {summary['ties']} ties, {summary['losses']} losses; "
        f"win rate {summary['win_rate']:.3f} ({confidence:.0%} interval {summary['win_rate_lower']:.3f}–"
        f"{summary['win_rate_upper']:.3f}), judged by {judge_kind}.{same}"
    )
