"""The `llmops` command line. Every subcommand calls the same function as its KFP
component; errors are one line and an exit code, never a traceback."""
from __future__ import annotations

import json
import os
import sys

import click

from kfp_llmops.components.common.errors import LlmopsError

POLICIES = click.Choice(["strict", "balanced", "permissive"])


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="kfp-llmops", prog_name="llmops")
def cli() -> None:
    """kfp-llmops: release an LLM through verifiable Kubeflow Pipelines stages."""


@cli.group()
def data() -> None:
    """Stage 1: dataset validation (schema, PII, dedup, drift, fingerprint)."""


@data.command("validate")
@click.argument("input_path", metavar="INPUT", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder for clean.jsonl, quarantine.jsonl, metrics.json, stats.json, report.md.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Stage config YAML (see components/data_validation/README.md).")
@click.option("--policy", type=POLICIES, help="PII policy; overrides the config's pii.policy.")
@click.option("--reference", "reference_stats", type=click.Path(dir_okay=False),
              help="stats.json of an earlier run; enables the drift check.")
@click.option("--near-dup/--no-near-dup", default=None, help="MinHash near-duplicate detection.")
@click.option("--dvc-remote", help="Record the clean data with DVC and push to this remote.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def data_validate(input_path, out_dir, config_path, policy, reference_stats, near_dup, dvc_remote,
                  no_progress) -> None:
    """Validate JSONL (optionally gzip) SFT data INPUT into --out.

    Exit 0: gate passed. Exit 1: gate failed (quarantine rate or drift; outputs written).
    Exit 2: unusable input or config.
    """
    from kfp_llmops.components.data_validation import raise_on_gate, run_to_dir

    overrides = {"dedup.near.enabled": near_dup}
    if dvc_remote:
        overrides.update({"dvc.enabled": True, "dvc.remote_url": dvc_remote})
    result = run_to_dir(input_path, out_dir, config_path, policy, reference_stats,
                        show_progress=not no_progress, overrides=overrides)
    m = result.metrics
    click.echo(f"rows_in={m['rows_in']} rows_out={m['rows_out']} rows_quarantined={m['rows_quarantined']} "
               f"reject_rate={m['reject_rate']:.2%} merkle_root={m['merkle_root']}")
    click.echo(f"outputs in {out_dir}")
    raise_on_gate(result)


@data.command("make-demo")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option("--rows", default=4000, show_default=True)
@click.option("--seed", default=7, show_default=True)
def data_make_demo(out_dir, rows, seed) -> None:
    """Write the bundled demo dataset (train.jsonl with deliberate faults, eval.jsonl)."""
    from .demo_data import make_demo_dataset

    info = make_demo_dataset(out_dir, rows=rows, seed=seed)
    click.echo(json.dumps(info, indent=2))


@cli.command("compile")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Output folder (default: the package's pipelines/compiled).")
@click.option("--check", is_flag=True, help="Exit 1 if the committed YAML differs (GitOps drift gate).")
def compile_cmd(out_dir, check) -> None:
    """Compile every pipeline to KFP IR YAML (byte-deterministic)."""
    from .compile import COMPILED_DIR, compile_all

    target = out_dir or COMPILED_DIR
    stale = compile_all(target, check=check)
    if check and stale:
        raise LlmopsError(f"compiled pipelines are stale: {', '.join(stale)}; run `llmops compile`")
    click.echo(f"{'checked' if check else 'compiled'} into {target}: "
               f"{'up to date' if not stale else 'updated ' + ', '.join(stale)}")


@cli.command("run")
@click.option("--out", "out_dir", default="runs/demo", show_default=True, type=click.Path(file_okay=False),
              help="Run folder: data, pipeline outputs, summary.json.")
@click.option("--pipeline", default="release", show_default=True, type=click.Choice(["release"]))
@click.option("--dataset", type=click.Path(exists=True, dir_okay=False),
              help="Raw JSONL to use instead of the bundled demo dataset.")
@click.option("--rows", default=4000, show_default=True, help="Rows of the bundled demo dataset.")
@click.option("--policy", default="balanced", show_default=True, type=POLICIES)
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False),
              help="Data-validation config YAML passed to the pipeline.")
def run_cmd(out_dir, pipeline, dataset, rows, policy, config_path) -> None:
    """Run a pipeline locally through kfp.local (SubprocessRunner)."""
    from .local_run import format_summary, run_local

    data_config = open(config_path, encoding="utf-8").read() if config_path else ""
    summary = run_local(out_dir, pipeline, rows, policy, data_config, dataset)
    click.echo(format_summary(summary))


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="llmops", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except LlmopsError as exc:
        click.echo(f"error: {exc}", err=True)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
        if os.environ.get("LLMOPS_DEBUG") == "1":
            raise
        click.echo(f"internal error: {type(exc).__name__}: {exc} (LLMOPS_DEBUG=1 shows the traceback)",
                   err=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
