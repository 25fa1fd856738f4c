"""Stage 1 on the command line: `llmops data validate` and the demo data."""

from __future__ import annotations

import json

import click

from .options import POLICIES, config_option


@click.group()
def data() -> None:
    """Stage 1: dataset validation (schema, PII, dedup, drift, fingerprint)."""


@data.command("validate")
@click.argument("input_path", metavar="INPUT", type=click.Path())
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder for clean.jsonl, quarantine.jsonl, metrics.json, stats.json, report.md.",
)
@config_option("Stage config YAML (every key: docs/reference.md).")
@click.option("--policy", type=POLICIES, help="PII policy; overrides the config's pii.policy.")
@click.option(
    "--reference",
    "reference_stats",
    type=click.Path(dir_okay=False),
    help="stats.json of an earlier run; enables the drift check.",
)
@click.option("--near-dup/--no-near-dup", default=None, help="MinHash near-duplicate detection.")
@click.option("--dvc-remote", help="Record the clean data with DVC and push to this remote.")
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    help="'ray': byte-range shards as Ray tasks, the same outputs; overrides the config's engine.",
)
@click.option("--workers", type=click.IntRange(1, 4096), help="CPUs of the local Ray (ray.workers).")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def data_validate(
    input_path, out_dir, config_path, policy, reference_stats, near_dup, dvc_remote, engine, workers, no_progress
) -> None:
    """Validate JSONL (optionally gzip) SFT data INPUT into --out.

    INPUT is a file, or a folder of them (part files: read in name order as one stream,
    quarantine entries naming each row's file).

    Exit 0: gate passed. Exit 1: gate failed (quarantine rate or drift; outputs written).
    Exit 2: unusable input or config.
    """
    from kfp_llmops.components.common.contract import raise_unless_passed
    from kfp_llmops.components.data_validation import run_to_dir, stage_result

    overrides = {"dedup.near.enabled": near_dup, "engine": engine, "ray.workers": workers}
    if dvc_remote:
        overrides.update({"dvc.enabled": True, "dvc.remote_url": dvc_remote})
    result = run_to_dir(
        input_path, out_dir, config_path, policy, reference_stats, show_progress=not no_progress, overrides=overrides
    )
    m = result.metrics
    click.echo(
        f"rows_in={m['rows_in']} rows_out={m['rows_out']} rows_quarantined={m['rows_quarantined']} "
        f"reject_rate={m['reject_rate']:.2%} merkle_root={m['merkle_root']}"
    )
    click.echo(f"outputs in {out_dir}")
    raise_unless_passed(stage_result(result))


@data.command("make-demo")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option("--rows", default=4000, show_default=True, help="Fact rows; a quarter as many prose rows are added.")
@click.option("--seed", default=7, show_default=True)
def data_make_demo(out_dir, rows, seed) -> None:
    """Write the bundled demo dataset (train.jsonl with deliberate faults, eval.jsonl) and the
    stage configs the demo runs it with (train.yaml, watermark.yaml, deploy.yaml)."""
    from ..demo.demo_data import make_demo_dataset, write_demo_configs

    info = make_demo_dataset(out_dir, rows=rows, seed=seed)
    info["configs"] = write_demo_configs(out_dir)
    click.echo(json.dumps(info, indent=2))
