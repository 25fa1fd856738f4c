"""KFP interface of verify_watermark. The logic lives in this package's other modules."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Metrics, Model, Output

from kfp_llmops.components import images


@dsl.component(base_image=images.EVAL, install_kfp_package=False)
def verify_watermark(
    model: Input[Model],
    eval_dataset: Input[Dataset],
    blessing: Input[Artifact],
    watermarked: Output[Dataset],
    metrics: Output[Metrics],
    report: Output[HTML],
    config: str = "",
    key_file: str = "",
    release_dir: str = "",
) -> bool:
    """Generate with the KGW watermark, measure TPR, FPR and robustness, and gate.

    The key never appears in the pipeline YAML.

    Args:
        model: The blessed model.
        eval_dataset: Held-out prompts (the same eval set evaluate_llm used).
        blessing: evaluate_llm's blessing: the quality cost is measured under the decoding it records.
        watermarked: The watermark parameters verified, and the watermarked answers.
        metrics: TPR, FPR, robustness and the quality cost.
        report: The watermark report (HTML).
        config: Stage config as YAML or one-line JSON; empty for the defaults.
        key_file: File with the watermark key (a mounted Secret); else $LLMOPS_WATERMARK_KEY.
        release_dir: Folder of the release record and lineage notes.
    """
    from kfp_llmops.components.common.contract import said_in_one_line
    from kfp_llmops.components.watermark import run_component

    with said_in_one_line():
        return run_component(
            model=model,
            eval_dataset=eval_dataset,
            config=config,
            key_file=key_file,
            watermarked=watermarked,
            metrics=metrics,
            report=report,
            release_dir=release_dir,
            blessing=blessing,
        ).value
