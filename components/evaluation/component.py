"""KFP interface of evaluate_llm. The logic lives in this package's other modules."""
from typing import Optional

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Metrics, Model, Output

from kfp_llmops.components import images


@dsl.component(base_image=images.EVAL, install_kfp_package=False)
def evaluate_llm(
    model: Input[Model],
    eval_dataset: Input[Dataset],
    responses: Output[Dataset],
    metrics: Output[Metrics],
    blessing: Output[Artifact],
    report: Output[HTML],
    config: str = "",
    baseline_metrics: Optional[Input[Artifact]] = None,
    release_dir: str = "",
) -> bool:
    """Generate, score (BERTScore, Detoxify + alt-profanity-check, perplexity) and bless.

    `baseline_metrics` is the metrics JSON of the model now in production; without it
    the change thresholds are skipped (the report says so).
    """
    from kfp_llmops.components.evaluation import run_component

    return run_component(model, eval_dataset, baseline_metrics, config, responses, metrics, blessing, report,
                         release_dir)
