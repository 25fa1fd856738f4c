"""Stage 3 on the command line: `llmops eval` and the BERTScore baseline."""

from __future__ import annotations

import click

from kfp_llmops.components.common.errors import LlmopsError

from .options import config_option


@click.command("eval")
@click.option(
    "--model",
    "model_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Model folder with a manifest (train_zero3's model output).",
)
@click.option(
    "--data",
    "eval_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Eval JSONL of {id, prompt, response (the reference)}.",
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="responses.jsonl, samples.jsonl, metrics.json, blessing.json, report.md/html.",
)
@config_option("Evaluation config YAML.")
@click.option(
    "--baseline",
    "baseline_path",
    type=click.Path(dir_okay=False),
    help="metrics.json of the model in production (enables change thresholds).",
)
@click.option("--model-root", help="Expected Merkle root of --model (refuse anything else).")
@click.option(
    "--production-model",
    type=click.Path(file_okay=False),
    help="The sealed model in production: both answer the same prompts and a judge decides (win rate).",
)
@click.option("--production-root", help="Pinned Merkle root of --production-model.")
@click.option(
    "--base-model",
    type=click.Path(file_okay=False),
    help="The sealed model training started from: forgetting is its perplexity on held-out prose "
    "against the candidate's.",
)
@click.option("--base-model-root", help="Pinned Merkle root of --base-model (default: its manifest's).")
@click.option("--no-progress", is_flag=True)
def eval_cmd(
    model_dir,
    eval_path,
    out_dir,
    config_path,
    baseline_path,
    model_root,
    production_model,
    production_root,
    base_model,
    base_model_root,
    no_progress,
) -> None:
    """Evaluate a model: generation, BERTScore, toxicity (two detectors), perplexity, blessing.

    Exit 0: blessed. Exit 1: not blessed (every failed check listed). Exit 2: bad input.
    """
    from kfp_llmops.components.common.contract import raise_unless_passed
    from kfp_llmops.components.evaluation import run_to_dir, stage_result

    if production_model and not production_root:
        raise LlmopsError("--production-root: required with --production-model (the root `llmops model seal` printed)")
    result = run_to_dir(
        model_dir,
        eval_path,
        out_dir,
        config_path,
        baseline_path,
        model_root,
        show_progress=not no_progress,
        production_model=production_model,
        production_root=production_root,
        base_model=base_model,
        base_model_root=base_model_root,
    )
    from kfp_llmops.components.evaluation.report import forgetting_line, headline, win_line

    m = result["metrics"]
    click.echo(
        f"samples={m['samples']} bertscore_f1={m['bertscore_f1']:.4f} perplexity={m['perplexity']:.3f} "
        f"toxicity_flagged_rate={m['toxicity_flagged_rate']:.3f} blessed={result['blessed']}"
    )
    click.echo(headline(result))
    if win_line(result):
        click.echo(win_line(result))
    if forgetting_line(result):
        click.echo(forgetting_line(result))
    for c in result["checks"]:
        click.echo(f"  {c['verdict'].upper():<7} {c['kind']:<6} {c['metric']:<22} {c['bound']} {c['reason']}")
    click.echo(f"outputs in {out_dir}")
    raise_unless_passed(stage_result(result))


@click.command("bertscore-baseline")
@click.option(
    "--out",
    "out_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="CSV to write (LAYER,P,R,F: bert-score's baseline format).",
)
@click.option("--model", default="minilm", show_default=True, help="'minilm' or a local model folder.")
@click.option("--layers", default=6, show_default=True, help="Layers of the model (rows 0..layers).")
def bertscore_baseline_cmd(out_path, model, layers) -> None:
    """Rebuild a BERTScore rescaling baseline: mean scores of random pairs of unrelated
    sentences per layer (the bundled MiniLM one is pinned; this shows where it comes from)."""
    import hashlib

    from kfp_llmops.components.common import bertscore_baseline
    from kfp_llmops.components.common.similarity import resolve_model

    text = bertscore_baseline.build(resolve_model(model), layers)
    with open(out_path, "w", encoding="utf-8") as handle:
        handle.write(text)
    click.echo(text.rstrip())
    click.echo(f"sha256 {hashlib.sha256(text.encode()).hexdigest()} -> {out_path}")
