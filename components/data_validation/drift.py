"""Reference statistics and the population stability index (PSI) between two runs.

The stats file a run writes is the reference for the next one, so drift needs no
separate profiling job. Bins are fixed, so any two stats files are comparable.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass, field

from kfp_llmops.components.common.errors import InputError

STATS_FORMAT = "kfp-llmops-data-stats/1"
# Record length in characters: log-spaced edges.
LENGTH_EDGES = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
# PII findings per word of a record, before redaction.
PII_EDGES = [1e-9, 0.02, 0.05, 0.1, 0.2, 0.4]
_EPS = 1e-4


@dataclass
class Histogram:
    edges: list[float]
    counts: list[int] = field(default_factory=list)

    def __post_init__(self):
        if not self.counts:
            self.counts = [0] * (len(self.edges) + 1)

    def add(self, value: float) -> None:
        self.counts[bisect.bisect_right(self.edges, value)] += 1

    def add_many(self, values: list[float]) -> None:
        """`add` of each value, binned in one go (numpy's side="right" is bisect_right)."""
        import numpy as np

        bins = np.searchsorted(self.edges, np.asarray(values), side="right")
        for i, n in enumerate(np.bincount(bins, minlength=len(self.counts)).tolist()):
            self.counts[i] += n

    def fractions(self) -> list[float]:
        total = sum(self.counts)
        return [c / total if total else 0.0 for c in self.counts]


@dataclass
class DataStats:
    length: Histogram = field(default_factory=lambda: Histogram(LENGTH_EDGES))
    pii_density: Histogram = field(default_factory=lambda: Histogram(PII_EDGES))

    @property
    def rows(self) -> int:
        return sum(self.length.counts)

    def add(self, chars: int, pii_density: float) -> None:
        self.length.add(chars)
        self.pii_density.add(pii_density)

    def add_lengths(self, lengths, densities=None) -> None:
        """`add(n, d)` for each of `lengths` and `densities` (lists or arrays; by default
        0.0: rows with no PII), counted in one go."""
        if len(lengths):
            self.length.add_many(lengths)
            if densities is None:
                self.pii_density.counts[bisect.bisect_right(self.pii_density.edges, 0.0)] += len(lengths)
            else:
                self.pii_density.add_many(densities)

    def to_json(self) -> dict:
        return {
            "format": STATS_FORMAT,
            "rows": self.rows,
            "length": {"edges": self.length.edges, "counts": self.length.counts},
            "pii_density": {"edges": self.pii_density.edges, "counts": self.pii_density.counts},
        }

    @classmethod
    def load(cls, path: str) -> DataStats:
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except OSError as exc:
            raise InputError(f"{path}: cannot read reference stats: {exc.strerror}") from None
        except ValueError as exc:
            raise InputError(f"{path}: reference stats are not JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != STATS_FORMAT:
            raise InputError(f"{path}: not a data-stats file (format must be {STATS_FORMAT!r})")
        try:
            stats = cls(
                Histogram(data["length"]["edges"], data["length"]["counts"]),
                Histogram(data["pii_density"]["edges"], data["pii_density"]["counts"]),
            )
        except (KeyError, TypeError) as exc:
            raise InputError(f"{path}: reference stats lack field {exc}") from None
        if stats.length.edges != LENGTH_EDGES or stats.pii_density.edges != PII_EDGES:
            raise InputError(f"{path}: reference stats use different bin edges")
        if stats.rows == 0:
            raise InputError(f"{path}: reference stats hold no rows")
        return stats


def psi(expected: Histogram, actual: Histogram) -> float:
    """PSI = sum((a - e) * ln(a / e)); empty bins are floored at 1e-4 so it stays finite."""
    total = 0.0
    for e, a in zip(expected.fractions(), actual.fractions(), strict=False):
        e, a = max(e, _EPS), max(a, _EPS)
        total += (a - e) * math.log(a / e)
    return total


def drift(reference: DataStats, current: DataStats) -> dict[str, float]:
    return {
        "length": psi(reference.length, current.length),
        "pii_density": psi(reference.pii_density, current.pii_density),
    }
