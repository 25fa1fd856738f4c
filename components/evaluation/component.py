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
    note: Output[Artifact],
    config: str = "",
    baseline_metrics: Optional[Input[Artifact]] = None,
    baseline_release: str = "none",
    model_root: str = "",
    eval_root: str = "",
    base_model: Optional[Input[Model]] = None,
    base_model_root: str = "",
) -> bool:
    """Generate, score (exact match, degenerate-output checks, BERTScore, Detoxify +
    alt-profanity-check, perplexity) and bless.

    `baseline_metrics` is the metrics JSON of the model now in production; without it the
    promoted release's blessed metrics are the baseline (`baseline_release`: a pinned
    `<record.json>#sha256=<hex>`, a promoted.json, or none); a first release skips the
    change thresholds and says so. `model_root` (else the model's metadata) and
    `eval_root` are checked before anything else. Touches no shared folder (`note` is the
    lineage note), so KFP may cache it: its key is the model, the roots, the config and
    the pinned baseline. `base_model`, the model training started from (its root pinned
    by `base_model_root`, else its metadata), is what the forgetting check compares the
    candidate's perplexity on held-out prose with.
    """
    from kfp_llmops.components.evaluation import run_component

    return run_component(model, eval_dataset, baseline_metrics, config, responses, metrics, blessing, report,
                         note, baseline_release, model_root, eval_root, base_model, base_model_root)
