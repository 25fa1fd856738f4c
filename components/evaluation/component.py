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
    baseline_release: str = "auto",
) -> bool:
    """Generate, score (exact match, degenerate-output checks, BERTScore, Detoxify +
    alt-profanity-check, perplexity) and bless.

    `baseline_metrics` is the metrics JSON of the model now in production; without it the
    last promoted release's blessed metrics are the baseline (`baseline_release`: auto,
    none, or a promoted.json); a first release skips the change thresholds and says so.
    """
    from kfp_llmops.components.evaluation import run_component

    return run_component(model, eval_dataset, baseline_metrics, config, responses, metrics, blessing, report,
                         release_dir, baseline_release)
