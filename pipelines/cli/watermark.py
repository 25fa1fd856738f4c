"""Stage 4 on the command line: detection and verification."""

from __future__ import annotations

import json

import click

from .options import blessed, config_option, watermark_key_option


@click.group()
def watermark() -> None:
    """Stage 4: KGW text watermark: detection and verification."""


@watermark.command("detect")
@click.argument("texts", metavar="FILE", type=click.Path(dir_okay=False))
@watermark_key_option()
@click.option(
    "--tokenizer",
    "tokenizer_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Tokenizer folder of the generating model.",
)
@click.option(
    "--params",
    "params_path",
    type=click.Path(dir_okay=False),
    help="The KGW parameters: a watermark config YAML, or metrics.json of `llmops watermark verify` "
    "(default: the defaults).",
)
def watermark_detect(texts, key_file, tokenizer_dir, params_path) -> None:
    """Print one JSON per text of FILE (JSONL with `response` or `text`): z, p, tokens, verdict."""
    from kfp_llmops.components.common.watermark.keys import load_key
    from kfp_llmops.components.watermark import detect_file, detection_params

    for row in detect_file(texts, tokenizer_dir, load_key(key_file), detection_params(params_path)):
        click.echo(json.dumps(row))


@watermark.command("verify")
@click.option("--model", "model_dir", required=True, type=click.Path(file_okay=False))
@click.option(
    "--data",
    "eval_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Eval JSONL: its prompts are generated from, its references calibrate the FPR.",
)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@config_option("Watermark config YAML.")
@watermark_key_option()
@click.option("--model-root", help="Expected Merkle root of --model.")
@click.option(
    "--blessing",
    type=click.Path(dir_okay=False),
    help="blessing.json from evaluate_llm: the cost is "
    "measured under the decoding it records (what is served); without: greedy.",
)
def watermark_verify(model_dir, eval_path, out_dir, config_path, key_file, model_root, blessing) -> None:
    """Generate with the watermark on; TPR, FPR, robustness; exit 0 verified, 1 not, 2 bad input."""
    from kfp_llmops.components.common.contract import raise_unless_passed
    from kfp_llmops.components.watermark import run_to_dir, stage_result

    decoding = blessed(blessing, None)[1] if blessing else None
    result = run_to_dir(model_dir, eval_path, out_dir, config_path, key_file, model_root, decoding)
    m = result["metrics"]
    click.echo(
        f"tpr={m['tpr']:.3f} fpr={m['fpr']:.3f} tpr_substitution_10={m.get('tpr_substitution_10', float('nan')):.3f} "
        f"verified={result['verified']}"
    )
    from kfp_llmops.components.watermark.report import quality_line

    click.echo(quality_line(m))
    click.echo(f"outputs in {out_dir}")
    raise_unless_passed(stage_result(result))
