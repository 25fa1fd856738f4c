"""The Markdown report shown in the Kubeflow UI (and written next to the CLI outputs)."""

from __future__ import annotations

from .outputs import ValidationResult
from .schema import REASONS


def _table(header: tuple[str, ...], rows: list[tuple]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def render(result: ValidationResult, input_name: str) -> str:
    m = result.metrics
    verdict = "PASSED" if result.passed else "FAILED"
    lines = [
        f"# Data validation: {verdict}",
        "",
        f"Input `{input_name}` ({m['input_bytes']:,} bytes"
        f"{' in ' + format(m['input_files'], ',') + ' files' if m.get('input_files') else ''}"
        f"{', gzip' if m['input_compressed'] else ''}), policy **{m['policy']}**.",
        "",
    ]
    lines += _table(
        ("rows in", "clean", "quarantined", "quarantine rate", "limit"),
        [
            (
                f"{m['rows_in']:,}",
                f"{m['rows_out']:,}",
                f"{m['rows_quarantined']:,}",
                f"{m['reject_rate']:.2%}",
                f"{m['max_reject_rate']:.2%}",
            )
        ],
    )
    if result.gate_reasons:
        lines += ["", "**Gate failed:**", ""] + [f"- {r}" for r in result.gate_reasons]
    lines += ["", f"Clean data Merkle root (BLAKE3, {m['chunk_size']:,}-byte chunks): `{m['merkle_root']}`", ""]
    if m["by_reason"]:
        lines += ["## Quarantine reasons", ""]
        lines += _table(
            ("reason", "rows", "meaning"), [(k, f"{n:,}", REASONS.get(k, "")) for k, n in m["by_reason"].items()]
        )
        lines.append("")
    if m["pii_found"]:
        lines += ["## PII", "", f"{m['rows_with_pii']:,} rows contained PII.", ""]
        lines += _table(
            ("type", "found", "redacted"),
            [(k, f"{n:,}", f"{m['pii_redacted'].get(k, 0):,}") for k, n in m["pii_found"].items()],
        )
        lines.append("")
    lines += ["## Drift", ""]
    if m["drift_psi"] is None:
        lines += [
            "No reference statistics: drift was not checked"
            + (f" ({m['drift_reference']})" if m.get("drift_reference") else "")
            + ". This run's `stats` output can serve as the reference for the next run.",
            "",
        ]
    else:
        lines += [f"Compared with {m.get('drift_reference') or 'the reference statistics given'}.", ""]
        lines += _table(
            ("distribution", "PSI", "threshold", "verdict"),
            [
                (k, f"{v:.4f}", m["psi_threshold"], "ok" if v <= m["psi_threshold"] else "DRIFT")
                for k, v in m["drift_psi"].items()
            ],
        )
        lines.append("")
    if result.samples:
        lines += [
            "## First quarantined rows",
            "",
            "Raw lines are in the quarantine output (they may hold PII; access to it should be restricted).",
            "",
        ]
        lines += _table(
            ("line", "reason", "field", "detail"),
            [
                (
                    f"{s['file']}:{s['line']}" if "file" in s else s["line"],
                    s["reason"],
                    s["field"] or "",
                    s["detail"].replace("|", "\\|"),
                )
                for s in result.samples[:10]
            ],
        )
        lines.append("")
    return "\n".join(lines)
