"""KFP interface of validate_dataset. The logic lives in this package's other modules."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Markdown, Metrics, Output

from kfp_llmops.components import images


@dsl.component(base_image=images.DATA, install_kfp_package=False)
def validate_dataset(
    raw: Input[Dataset],
    clean: Output[Dataset],
    quarantine: Output[Dataset],
    stats: Output[Artifact],
    metrics: Output[Metrics],
    report: Output[Markdown],
    note: Output[Artifact],
    config: str = "",
    policy: str = "balanced",
    reference_stats: Input[Artifact] | None = None,
    baseline_release: str = "none",
    raw_root: str = "",
    engine: str = "",
) -> bool:
    """Validate SFT JSONL: schema, PII redaction, dedup, drift; returns the gate verdict.

    Touches no shared folder (`note` is the lineage note), so KFP may cache it: its key
    is the config, the raw data's root and the pinned baseline.

    Args:
        raw: The raw SFT data: a JSONL file (optionally gzip) or a folder of them.
        clean: The accepted rows, PII redacted; metadata merkle_root, chunk_size, rows.
        quarantine: The rejected rows with line, reason, field and detail (raw PII kept).
        stats: Length and PII-density histograms: the next release's drift reference.
        metrics: Row counts, quarantine reasons, PII found, drift, the gate's checks.
        report: The validation report (Markdown).
        note: This stage's lineage note, filed by the file-validate-note task.
        config: Stage config as YAML or one-line JSON; empty for the defaults.
        policy: PII policy: strict, balanced or permissive.
        reference_stats: An earlier run's stats, for drift; else the pinned release's.
        baseline_release: The pinned promoted release (<record.json>#sha256=<hex>), a promoted.json, or none.
        raw_root: The raw data's Merkle root, checked before anything else; empty skips the check.
        engine: local or ray; overrides the config's engine (the outputs are the same); empty keeps it.
    """
    from kfp_llmops.components.common.contract import said_in_one_line
    from kfp_llmops.components.data_validation import run_component

    with said_in_one_line():
        return run_component(
            raw=raw,
            config=config,
            policy=policy,
            reference_stats=reference_stats,
            clean=clean,
            quarantine=quarantine,
            stats=stats,
            metrics=metrics,
            report=report,
            note=note,
            baseline_release=baseline_release,
            raw_root=raw_root,
            engine=engine,
        ).value
