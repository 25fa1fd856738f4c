"""KFP interface of evaluate_llm. The logic lives in this package's other modules."""

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
    baseline_metrics: Input[Artifact] | None = None,
    baseline_release: str = "none",
    model_root: str = "",
    eval_root: str = "",
    base_model: Input[Model] | None = None,
    base_model_root: str = "",
) -> bool:
    """Generate, score (exact match, degenerate-output checks, BERTScore, Detoxify +
    alt-profanity-check, perplexity) and bless.

    Touches no shared folder (`note` is the lineage note), so KFP may cache it: its key is
    the model, the roots, the config and the pinned baseline. A first release skips the
    change thresholds and says so.

    Args:
        model: The candidate model (a sealed Hugging Face folder).
        eval_dataset: Held-out prompts with reference responses (JSONL).
        responses: Every prompt, the candidate's answer and its reference (JSONL).
        metrics: The scores: exact match, BERTScore, toxicity, perplexity and the rest.
        blessing: Every check with its value, bound and verdict, the decoding judged and the baseline compared with.
        report: The evaluation report (HTML).
        note: This stage's lineage note, filed by the file-evaluate-note task.
        config: Stage config as YAML or one-line JSON; empty for the defaults.
        baseline_metrics: The production model's metrics; else the pinned release's blessed metrics.
        baseline_release: The pinned promoted release (<record.json>#sha256=<hex>), a promoted.json, or none.
        model_root: The model's Merkle root, checked first; empty: the model's metadata.
        eval_root: The eval set's Merkle root, checked first; empty skips the check.
        base_model: The model training started from: the forgetting check's reference.
        base_model_root: The base model's Merkle root; empty: its metadata.
    """
    from kfp_llmops.components.common.contract import said_in_one_line
    from kfp_llmops.components.evaluation import run_component

    with said_in_one_line():
        return run_component(
            model=model,
            eval_dataset=eval_dataset,
            baseline_metrics=baseline_metrics,
            config=config,
            responses=responses,
            metrics=metrics,
            blessing=blessing,
            report=report,
            note=note,
            baseline_release=baseline_release,
            model_root=model_root,
            eval_root=eval_root,
            base_model=base_model,
            base_model_root=base_model_root,
        ).value
