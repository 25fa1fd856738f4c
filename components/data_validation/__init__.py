"""Stage 1, validate_dataset: schema and quality checks, PII redaction, deduplication,
drift, a Merkle fingerprint of the clean data, optional DVC versioning.

`run_to_dir` serves the CLI, `run_component` the KFP component; both call `execute`.
"""

from __future__ import annotations

import os
from typing import Any

from kfp_llmops.components.common.contract import Artifact, Metrics, StageResult

from .config import DataValidationConfig
from .engines import validate
from .outputs import CLEAN_NAME, OutputPaths, ValidationResult

__all__ = ["DataValidationConfig", "ValidationResult", "execute", "run_component", "run_to_dir", "stage_result"]


def execute(
    input_path: str,
    outputs: OutputPaths,
    config: DataValidationConfig,
    report_path: str | None,
    reference_stats: str | None = None,
    show_progress: bool = True,
    reference_note: str | None = None,
) -> ValidationResult:
    from . import report

    result = validate(input_path, outputs, config, reference_stats, show_progress)
    result.metrics["drift_reference"] = reference_note or reference_stats
    if config.dvc.enabled and result.passed:
        from .dvc_store import record

        result.metrics["dvc"] = record(outputs.clean, config.dvc)
        if outputs.metrics:
            from .outputs import write_json

            write_json(outputs.metrics, result.metrics)
    if report_path:
        with open(report_path, "w", encoding="utf-8") as handle:
            handle.write(report.render(result, os.path.basename(os.path.normpath(input_path))))
    return result


def run_to_dir(
    input_path: str,
    out_dir: str,
    config_source: str | None = None,
    policy: str | None = None,
    reference_stats: str | None = None,
    show_progress: bool = True,
    overrides: dict[str, Any] | None = None,
) -> ValidationResult:
    """CLI entry: outputs land in `out_dir`; raises GateFailed (exit 1) when the gate fails."""
    config = DataValidationConfig.load(config_source, {"pii.policy": policy, **(overrides or {})})
    return execute(
        input_path,
        OutputPaths.in_dir(out_dir),
        config,
        os.path.join(out_dir, "report.md"),
        reference_stats,
        show_progress,
    )


def run_component(
    *,
    raw: Artifact,
    config: str,
    policy: str,
    clean: Artifact,
    quarantine: Artifact,
    stats: Artifact,
    metrics: Metrics,
    report: Artifact,
    reference_stats: Artifact | None = None,
    note: Artifact | None = None,
    baseline_release: str = "auto",
    raw_root: str = "",
    engine: str = "",
) -> StageResult:
    """KFP entry: writes into the artifacts' paths and stamps the lineage metadata. Drift
    is measured against `reference_stats` when given, else against the promoted release
    `baseline_release` pins (common.baseline), which must verify. `raw_root` (the pipeline's
    fingerprint of the raw data) is checked first: a cached result is keyed by it, so the
    bytes validated must be the bytes it names. The lineage note goes into `note`, never a
    shared folder, so the task can be cached."""
    from kfp_llmops.components.common import baseline, integrity, records

    cfg = DataValidationConfig.load(config, {"pii.policy": policy or None, "engine": engine or None})
    if raw_root:
        integrity.verify("dataset", raw.path, raw_root)
    for artifact in (clean, quarantine, stats, metrics, report) + ((note,) if note is not None else ()):
        os.makedirs(os.path.dirname(artifact.path), exist_ok=True)
    reference, why = reference_stats.path if reference_stats is not None else None, None
    if reference_stats is None:
        promoted = baseline.load("", baseline_release)
        reference, why = (promoted.stats_path if promoted else None), baseline.note(promoted)
    outputs = OutputPaths(clean.path, quarantine.path, None, stats.path)
    result = execute(raw.path, outputs, cfg, report.path, reference, show_progress=True, reference_note=why)
    m = result.metrics
    _publish(m, clean, quarantine, metrics)
    if note is not None:  # the stats are the next release's drift reference: filed beside the note
        records.write(
            note.path,
            records.ValidateDataset(
                params={"data_config": config, "pii_policy": policy, **({"data_engine": engine} if engine else {})},
                result="passed" if result.passed else "failed",
                reason="; ".join(result.gate_reasons) or None,
                outputs=records.ValidateOutputs(
                    clean=records.CleanData(
                        root=m["merkle_root"],
                        path=clean.path,
                        merkle_file=CLEAN_NAME,
                        rows=m["rows_out"],
                        chunk_size=m["chunk_size"],
                    ),
                    stats=records.Artifact(root=integrity.sha256_file(stats.path), path=stats.path),
                ),
            ),
        )
    summary = stage_result(result)
    if not summary.passed:
        print(f"validate_dataset gate failed: {summary.reason}")
    return summary


def _publish(m: dict, clean: Artifact, quarantine: Artifact, metrics: Metrics) -> None:
    """The outputs' metadata and metrics as the KFP UI shows them."""
    metrics.metadata["drift_reference"] = m["drift_reference"] or "none"
    clean.metadata.update(
        {
            "merkle_root": m["merkle_root"],
            "chunk_size": m["chunk_size"],
            "merkle_file": CLEAN_NAME,
            "rows": m["rows_out"],
            "bytes": m["clean_bytes"],
            "format": "jsonl",
            "policy": m["policy"],
        }
    )
    quarantine.metadata.update({"rows": m["rows_quarantined"], "by_reason": m["by_reason"], "contains_raw_pii": True})
    for key in ("rows_in", "rows_out", "rows_quarantined", "reject_rate", "rows_with_pii"):
        metrics.log_metric(key, m[key])
    for name, value in (m["drift_psi"] or {}).items():
        metrics.log_metric(f"psi_{name}", value)
    for reason, count in m["by_reason"].items():
        metrics.log_metric(f"quarantined_{reason}", count)
    for kind, count in m["pii_found"].items():
        metrics.log_metric(f"pii_{kind}", count)
    metrics.metadata["merkle_root"] = m["merkle_root"]


def stage_result(result: ValidationResult) -> StageResult:
    m = result.metrics
    return StageResult(
        "validate_dataset",
        result.passed,
        result.passed,
        "; ".join(result.gate_reasons),
        m.get("checks", []),
        {k: m[k] for k in ("rows_in", "rows_out", "rows_quarantined", "reject_rate", "rows_with_pii") if k in m},
    )
