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

    The key is read from `key_file` (mount the Secret there) or $LLMOPS_WATERMARK_KEY;
    it never appears in the pipeline YAML. The quality cost is measured under the
    decoding `blessing` (evaluate_llm's) records: the answers served.
    """
    from kfp_llmops.components.watermark import run_component

    return run_component(model, eval_dataset, config, key_file, watermarked, metrics, report, release_dir, blessing)
