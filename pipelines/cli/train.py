"""Stage 2 on the command line: the demo base model, `llmops train`, checkpoint verification."""

from __future__ import annotations

import json
import os

import click

from .options import config_option


@click.command("base-model")
@click.option(
    "--data",
    "clean_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Clean JSONL (validate_dataset output) to train the tokenizer on.",
)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option("--size", type=click.Choice(["demo", "tiny"]), default="demo", show_default=True)
def base_model_cmd(clean_path, out_dir, size) -> None:
    """Build the demo base model (BPE tokenizer + small GPT-2-style LM), sealed with a manifest."""
    from kfp_llmops.components.training.base_model import build_base_model

    click.echo(f"base model in {out_dir}, root {build_base_model(clean_path, out_dir, size=size)}")


@click.command("train")
@click.option(
    "--data", "clean_path", required=True, type=click.Path(dir_okay=False), help="Clean JSONL from validate_dataset."
)
@click.option(
    "--base-model",
    required=True,
    type=click.Path(file_okay=False),
    help="Hugging Face model folder with a manifest (llmops base-model makes one).",
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Run folder: checkpoints/, model/, train_log.jsonl, metrics.json, report.md.",
)
@config_option("Training config YAML.")
@click.option("--steps", type=int, help="Optimizer steps (overrides the config).")
@click.option("--ranks", type=int, help="Number of ranks (overrides world_size).")
@click.option("--dataset-root", help="Expected Merkle root of --data (refuse anything else).")
@click.option(
    "--dataset-chunk-size",
    type=int,
    help="Chunk size --dataset-root was computed at (validate_dataset's chunk_size; default 1 MiB).",
)
@click.option("--stop-after", type=int, help="Stop at this step with a checkpoint (the run can resume).")
@click.option(
    "--render-trainjob",
    type=click.Path(dir_okay=False),
    help="Write a Kubeflow Trainer TrainJob for a multi-node run instead of training here "
    "(train_zero3 with multinode.nodes > 1 creates and follows one itself).",
)
@click.option("--nodes", default=2, show_default=True, help="TrainJob: nodes.")
@click.option("--gpus-per-node", default=8, show_default=True, help="TrainJob: GPUs (and ranks) per node.")
@click.option(
    "--spec-path",
    default="/mnt/checkpoints/run.run/run_spec.json",
    show_default=True,
    help="TrainJob: where the run spec lies on shared storage.",
)
def train_cmd(
    clean_path,
    base_model,
    out_dir,
    config_path,
    steps,
    ranks,
    dataset_root,
    dataset_chunk_size,
    stop_after,
    render_trainjob,
    nodes,
    gpus_per_node,
    spec_path,
) -> None:
    """Train with DeepSpeed ZeRO-3 (torchrun, gloo on CPU / NCCL on GPU).

    Rerunning the same command resumes from the newest checkpoint that verifies.
    """
    if render_trainjob:
        import yaml

        from kfp_llmops.components.training.config import MultiNodeSettings
        from kfp_llmops.components.training.trainjob import render_trainjob as render

        doc = render(
            os.path.basename(os.path.abspath(out_dir)).lower().replace("_", "-") or "llmops-train",
            spec_path,
            MultiNodeSettings(nodes=nodes, gpus_per_node=gpus_per_node),
            gpus_per_node,
        )
        with open(render_trainjob, "w", encoding="utf-8") as handle:
            yaml.safe_dump(doc, handle, sort_keys=False)
        click.echo(f"TrainJob written to {render_trainjob}")
        return
    from kfp_llmops.components.training import run_to_dir

    result = run_to_dir(
        clean_path,
        base_model,
        out_dir,
        config_path,
        {"steps": steps, "world_size": ranks},
        dataset_root,
        stop_after,
        dataset_chunk_size,
    )
    click.echo(
        f"step={result['step']} final_loss={result['final_loss']:.4f} "
        f"tokens/s={result['tokens_per_s'] or 0:,.0f} (answers; "
        f"{result.get('processed_tokens_per_s') or 0:,.0f} processed) model_root={result['model_root']}"
    )
    click.echo(f"outputs in {out_dir}")


@click.group()
def checkpoint() -> None:
    """Merkle-verified checkpoints."""


@checkpoint.command("verify")
@click.argument("ckpt_dir", type=click.Path(file_okay=False))
@click.option("--tag", help="Tag to verify (default: the one `latest` names, else the newest).")
@click.option("--root", "expected_root", help="Expected checkpoint root (pinned elsewhere).")
@click.option("--files", "only", multiple=True, help="Check only these files, via their proof paths.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
def checkpoint_verify(ckpt_dir, tag, expected_root, only, as_json) -> None:
    """Verify a checkpoint: exit 0 when intact, 1 when not (every bad file and chunk listed)."""
    from kfp_llmops.components.common import integrity
    from kfp_llmops.components.training import checkpoints

    tag_dir = checkpoints.resolve_tag(ckpt_dir, tag)
    report = integrity.verify_checkpoint(tag_dir, expected_root, list(only) or None)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(
            f"{tag_dir}: {'intact' if report.ok else 'NOT intact'} "
            f"({report.files_checked} files, {report.bytes_checked:,} bytes, {report.seconds:.2f} s)"
        )
        click.echo(f"root {report.root}")
        for p in report.problems:
            ranges = ", ".join(f"[{a}, {b})" for a, b in p.ranges[:8])
            more = f" (+{len(p.ranges) - 8} more)" if len(p.ranges) > 8 else ""
            click.echo(f"  {p.kind:<11} {p.path or '-'}: {p.detail}" + (f" bytes {ranges}{more}" if ranges else ""))
    if not report.ok:
        raise SystemExit(1)
