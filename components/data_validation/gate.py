"""The gate: a run's totals judged against the stage's thresholds (reject rate, drift
against the reference statistics, at least one clean row) into its metrics and result.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from kfp_llmops.components.common import gates

from .blocks import Validator
from .config import DataValidationConfig
from .drift import drift
from .outputs import OutputPaths, ValidationResult, write_json
from .reader import Inputs


@dataclass
class Totals:
    """What `finish` reads from a validator, summed over the shards of a sharded run."""

    reference: Any
    stats: Any
    by_reason: Counter
    pii_found: Counter
    pii_redacted: Counter
    rows_with_pii: int
    samples: list

    def add(self, part: dict) -> None:
        self.by_reason.update(part["by_reason"])
        self.pii_found.update(part["pii_found"])
        self.pii_redacted.update(part["pii_redacted"])
        self.rows_with_pii += part["rows_with_pii"]
        self.samples.extend(part["samples"][: 20 - len(self.samples)])
        for hist, counts in ((self.stats.length, part["length"]), (self.stats.pii_density, part["pii_density"])):
            hist.counts = [a + b for a, b in zip(hist.counts, counts, strict=False)]


def finish(
    v: Validator | Totals,
    config: DataValidationConfig,
    inputs: Inputs,
    compressed: bool,
    outputs: OutputPaths,
    rows_in: int,
    rows_out: int,
    root: str,
    clean_bytes: int,
    elapsed: float,
) -> ValidationResult:
    rows_q = rows_in - rows_out
    reject_rate = rows_q / rows_in if rows_in else 0.0
    checks = [
        gates.at_most("reject_rate", reject_rate, config.gate.max_reject_rate, f"quarantine rate {reject_rate:.1%}")
    ]
    psi = None
    if v.reference is not None and v.stats.rows:
        psi = drift(v.reference, v.stats)
        checks += [
            gates.at_most(f"psi_{name}", value, config.gate.max_psi, f"drift of {name}", "drift")
            for name, value in psi.items()
        ]
    else:
        checks.append(
            gates.Check("psi", None, f"<= {config.gate.max_psi:g}", "skipped", "no reference statistics", "drift")
        )
    checks.append(gates.at_least("rows_out", rows_out, 1, "no row passed validation" if rows_out == 0 else ""))
    gate_reasons = gates.failures(checks)
    metrics = {
        "rows_in": rows_in,
        "rows_out": rows_out,
        "rows_quarantined": rows_q,
        "reject_rate": reject_rate,
        "by_reason": dict(sorted(v.by_reason.items())),
        "pii_found": dict(sorted(v.pii_found.items())),
        "pii_redacted": dict(sorted(v.pii_redacted.items())),
        "rows_with_pii": v.rows_with_pii,
        "policy": config.pii.policy.value,
        "merkle_root": root,
        "chunk_size": config.chunk_size,
        "clean_bytes": clean_bytes,
        "input_bytes": inputs.size,
        "input_compressed": compressed,
        **({"input_files": len(inputs.files)} if inputs.folder else {}),
        "drift_psi": psi,
        "psi_threshold": config.gate.max_psi,
        "max_reject_rate": config.gate.max_reject_rate,
        "passed": not gate_reasons,
        "gate_reasons": gate_reasons,
        "checks": [c.to_json() for c in checks],
        "elapsed_s": round(elapsed, 3),
    }
    if outputs.stats:
        write_json(outputs.stats, v.stats.to_json())
    if outputs.metrics:
        write_json(outputs.metrics, metrics)
    return ValidationResult(metrics, not gate_reasons, gate_reasons, v.samples)
