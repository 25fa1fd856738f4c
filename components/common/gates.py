"""The one gate shape. Every stage's gate (the data gate, the blessing, the watermark
verification, each canary interval) is a list of checks, each a metric, its value, the
bound in words, and a verdict; a gate passes when no check failed ("skipped" is not a
failure and says why in `reason`). Reports, records and the KFP UI read this shape."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

VERDICTS = ("pass", "fail", "skipped")


@dataclass
class Check:
    metric: str
    value: float | None
    bound: str  # "<= 0.01", ">= 0.95 and <= 1", "" when there is none
    verdict: str  # pass | fail | skipped
    reason: str = ""
    kind: str = "value"  # value | change (against a baseline) | a stage's own kind
    baseline: float | None = None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")

    @property
    def passed(self) -> bool:
        return self.verdict != "fail"

    def to_json(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        value = "missing" if self.value is None or _nan(self.value) else f"{self.value:.4g}"
        text = f"{self.metric} {value}" + (f" (needs {self.bound})" if self.bound else "")
        return text + (f": {self.reason}" if self.reason else "")


def _nan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _verdict(ok: bool) -> str:
    return "pass" if ok else "fail"


def at_most(metric: str, value: float | None, bound: float, reason: str = "", kind: str = "value") -> Check:
    """value <= bound; a missing or NaN value fails."""
    ok = value is not None and not _nan(value) and value <= bound
    return Check(metric, value, f"<= {bound:g}", _verdict(ok), reason, kind)


def at_least(metric: str, value: float | None, bound: float, reason: str = "", kind: str = "value") -> Check:
    """value >= bound; a missing or NaN value fails."""
    ok = value is not None and not _nan(value) and value >= bound
    return Check(metric, value, f">= {bound:g}", _verdict(ok), reason, kind)


def holds(
    metric: str, ok: bool, reason: str = "", value: float | None = None, bound: str = "", kind: str = "value"
) -> Check:
    """A check decided elsewhere (a smoke test, a sequential test)."""
    return Check(metric, value, bound, _verdict(ok), reason, kind)


def passed(checks: list[Check]) -> bool:
    return all(c.passed for c in checks)


def failures(checks: list[Check]) -> list[str]:
    """One line per failed check, for errors and logs."""
    return [c.describe() for c in checks if not c.passed]
