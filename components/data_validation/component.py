"""KFP interface of validate_dataset. The logic lives in this package's other modules."""
from typing import Optional

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
    reference_stats: Optional[Input[Artifact]] = None,
    baseline_release: str = "none",
    raw_root: str = "",
    engine: str = "",
) -> bool:
    """Validate SFT JSONL: schema, PII redaction, dedup, drift; returns the gate verdict.

    `config` is the stage's YAML (empty for defaults); `reference_stats` is the `stats`
    output of an earlier run, for drift; without it, the promoted release's stats are the
    reference (`baseline_release`: a pinned `<record.json>#sha256=<hex>`, a promoted.json,
    or none). `raw_root` is the raw data's Merkle root, checked before anything else.
    `engine` (local or ray) overrides the config's; the outputs are the same either way.
    Touches no shared folder (`note` is the lineage note), so KFP may cache it: its key
    is the config, the raw data's root and the pinned baseline.
    """
    from kfp_llmops.components.data_validation import run_component

    return run_component(raw.path, config, policy, reference_stats.path if reference_stats else None,
                         clean, quarantine, stats, metrics, report, note, baseline_release, raw_root,
                         engine)
