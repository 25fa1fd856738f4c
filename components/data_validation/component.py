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
    config: str = "",
    policy: str = "balanced",
    reference_stats: Optional[Input[Artifact]] = None,
    release_dir: str = "",
    baseline_release: str = "auto",
) -> bool:
    """Validate SFT JSONL: schema, PII redaction, dedup, drift; returns the gate verdict.

    `config` is the stage's YAML (empty for defaults); `reference_stats` is the `stats`
    output of an earlier run, for drift; without it, the last promoted release's stats are
    the reference (`baseline_release`: auto, none, or a promoted.json). `release_dir`
    receives the stage's lineage note and a copy of the stats.
    """
    from kfp_llmops.components.data_validation import run_component

    return run_component(raw.path, config, policy, reference_stats.path if reference_stats else None,
                         clean, quarantine, stats, metrics, report, release_dir, baseline_release)
