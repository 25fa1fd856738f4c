"""The pipelines on the command line: lineage, a stage by itself, compile, submit and the local run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import click

from kfp_llmops.components.common.errors import LlmopsError

from .options import POLICIES, config_option


@click.group()
def lineage() -> None:
    """Lineage across stages: dataset -> checkpoints -> model -> deployed repository."""


@lineage.command("verify")
@click.argument("record_path", metavar="RECORD", type=click.Path(dir_okay=False))
@click.option(
    "--public-key",
    type=click.Path(dir_okay=False),
    help="PEM public key: check the signed attestation "
    "and the model's, repository's and served folder's signatures (else $LLMOPS_SIGNING_PUBLIC_KEY).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result.")
def lineage_verify(record_path, public_key, as_json) -> None:
    """Prove (exit 0) or refute (exit 1, naming the broken link) that what serves traffic
    descends from the validated dataset; artifacts still on disk, and the bytes the stable
    server loads, are re-hashed. RECORD is record.json or the signed provenance
    (provenance.intoto.json, a DSSE envelope: its signature is checked first)."""
    from kfp_llmops.components.common import signing
    from kfp_llmops.components.release.lineage import load_record, verify

    public_key = signing.key_file(public_key, public=True)
    ok, links = verify(load_record(record_path, public_key), public_key)
    if as_json:
        click.echo(json.dumps({"ok": ok, "links": [link.to_json() for link in links]}, indent=2))
    else:
        for link in links:
            click.echo(f"  {'ok ' if link.ok else 'BROKEN'} {link.link:<24} {link.detail}")
        broken = next((link for link in links if not link.ok), None)
        click.echo(
            "lineage proven: what serves traffic descends from the validated dataset"
            if ok
            else f"lineage refuted at '{broken.link}': {broken.detail}"
        )
    if not ok:
        raise SystemExit(1)


def _params(items: tuple[str, ...]) -> dict[str, str]:
    """`--param NAME=VALUE` options as a dict (stage runs and submitted runs alike)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise LlmopsError(f"--param {item!r}: expected NAME=VALUE")
        out[key] = value
    return out


@click.group()
def stage() -> None:
    """Run a release stage without the KFP backend (what the Argo target runs)."""


@stage.command("run")
@click.argument("name")
@click.option("--work", required=True, type=click.Path(file_okay=False), help="Work folder shared by the stages.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE", help="A pipeline parameter.")
def stage_run(name, work, params) -> None:
    """Run stage NAME with its inputs from earlier stages' outputs under --work."""
    from ..standalone.runner import run_stage

    click.echo(f"{name}: {run_stage(name, work, _params(params))}")


@click.command("compile")
@click.option(
    "--target",
    "targets",
    multiple=True,
    type=click.Choice(["kfp", "k8s", "argo"]),
    help="kfp: KFP IR YAML; k8s: Pipeline + PipelineVersion manifests; argo: standalone "
    "WorkflowTemplate. Repeatable; default all.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    help="Output folder (default: the package's pipelines/compiled).",
)
@click.option("--check", is_flag=True, help="Exit 1 if the committed output differs (GitOps drift gate).")
@click.option(
    "--registry",
    envvar="LLMOPS_REGISTRY",
    help="Compile against images under this registry (or $LLMOPS_REGISTRY), e.g. registry.example.com/ml.",
)
@click.option("--tag", envvar="LLMOPS_IMAGE_TAG", help="Image tag (default: the package version).")
@click.option(
    "--digests",
    type=click.Path(exists=True, dir_okay=False),
    envvar="LLMOPS_IMAGE_DIGESTS",
    help="JSON {stage: sha256:...} (`llmops images push` writes it): reference images by digest.",
)
def compile_cmd(targets, out_dir, check, registry, tag, digests) -> None:
    """Compile every pipeline to each target (byte-deterministic)."""
    from kfp_llmops.components import images

    from ..compile import COMPILED_DIR, TARGETS, compile_all

    wanted = {
        "LLMOPS_REGISTRY": (registry or "").rstrip("/"),
        "LLMOPS_IMAGE_TAG": tag or "",
        "LLMOPS_IMAGE_DIGESTS": os.path.abspath(digests) if digests else "",
    }
    if any(wanted.values()) or images.customized():
        if not out_dir:
            raise LlmopsError(
                "--registry/--tag/--digests (or their variables) would write other image names into "
                "the committed pipelines/compiled; pass --out DIR"
            )
        current = {
            "LLMOPS_REGISTRY": images.REGISTRY if images.REGISTRY != images.DEFAULT_REGISTRY else "",
            "LLMOPS_IMAGE_TAG": images.TAG if images.TAG != images.VERSION else "",
            "LLMOPS_IMAGE_DIGESTS": os.environ.get("LLMOPS_IMAGE_DIGESTS", ""),
        }
        if current != wanted:  # image names are fixed at import: compile in a fresh interpreter
            argv = [sys.executable, "-m", "kfp_llmops.pipelines.cli.main", "compile", "--out", out_dir]
            argv += [a for t in targets for a in ("--target", t)] + (["--check"] if check else [])
            env = {k: v for k, v in os.environ.items() if k not in wanted}
            env.update({k: v for k, v in wanted.items() if v})
            raise click.exceptions.Exit(subprocess.run(argv, env=env).returncode)
    target = out_dir or COMPILED_DIR
    stale = compile_all(target, check=check, targets=tuple(targets) or TARGETS)
    if not out_dir and not targets:  # in a source checkout, manifests/ and docs/reference.md are kept in step too
        from ..manifests import MANIFESTS_DIR, write_all

        if os.path.isdir(MANIFESTS_DIR):
            from .. import reference

            stale += write_all(MANIFESTS_DIR, check=check) + reference.write(check=check)
    if check and stale:
        raise LlmopsError(f"compiled pipelines are stale: {', '.join(stale)}; run `llmops compile`")
    click.echo(
        f"{'checked' if check else 'compiled'} into {target}: "
        f"{'up to date' if not stale else 'updated ' + ', '.join(stale)}"
    )


@click.command("submit")
@click.option("--pipeline", default="release", show_default=True, help="A compiled pipeline's name.")
@click.option("--package", type=click.Path(dir_okay=False), help="Compiled KFP IR YAML (default: the committed one).")
@click.option("--host", envvar="KFP_HOST", required=True, help="KFP API endpoint (or $KFP_HOST).")
@click.option("--namespace", envvar="KFP_NAMESPACE", help="Kubeflow profile namespace (or $KFP_NAMESPACE).")
@click.option("--experiment", default="kfp-llmops", show_default=True)
@click.option("--run-name", help="Run name (default: KFP's).")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="A pipeline parameter.")
def submit_cmd(pipeline, package, host, namespace, experiment, run_name, params) -> None:
    """Run a compiled pipeline as a run of its pipeline version (uploaded if the server
    lacks it) and print the run URL. The token comes from $LLMOPS_KFP_TOKEN or
    $KF_PIPELINES_TOKEN."""
    from ..submit import submit

    result = submit(pipeline, package, host, namespace, experiment, _params(params), run_name)
    if result["uploaded"]:
        click.echo(f"uploaded {' and '.join(result['uploaded'])} {result['version']}")
    click.echo(f"run {result['run_id']} of {result['version']}: {result['url']}")


@click.command("run")
@click.option(
    "--out",
    "out_dir",
    default="runs/demo",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Run folder: data, pipeline outputs, summary.json.",
)
@click.option("--pipeline", default="release", show_default=True, type=click.Choice(["release"]))
@click.option(
    "--dataset",
    type=click.Path(exists=True, dir_okay=False),
    help="Raw JSONL to use instead of the bundled demo dataset.",
)
@click.option(
    "--eval-dataset",
    type=click.Path(exists=True, dir_okay=False),
    help="Held-out JSONL (prompt, reference response) instead of the demo's eval set.",
)
@click.option("--rows", default=4000, show_default=True, help="Rows of the bundled demo dataset.")
@click.option("--policy", default="balanced", show_default=True, type=POLICIES)
@config_option("Data-validation config YAML passed to the pipeline.", exists=True)
@click.option(
    "--train-config",
    "train_config_path",
    type=click.Path(exists=True, dir_okay=False),
    help="Training config YAML passed to the pipeline.",
)
@click.option(
    "--eval-config",
    "eval_config_path",
    type=click.Path(exists=True, dir_okay=False),
    help="Evaluation config YAML (the blessing gate's thresholds) passed to the pipeline.",
)
@click.option(
    "--watermark-config",
    "watermark_config_path",
    type=click.Path(exists=True, dir_okay=False),
    help="Watermark config YAML (KGW parameters, detection prompts, the cost gate); default: the "
    "demo's with the demo's data and model, else the stage's defaults.",
)
@click.option("--base-model-size", type=click.Choice(["demo", "tiny"]), default="demo", show_default=True)
@click.option(
    "--base-model",
    "base_model",
    type=click.Path(exists=True, file_okay=False),
    help="Your pretrained model (sealed with `llmops model seal`) to fine-tune instead of the demo model.",
)
@click.option("--base-model-root", help="Pin --base-model's Merkle root (default: the root it verifies to).")
@click.option(
    "--containers",
    is_flag=True,
    help="Run every stage in its image through kfp.local's DockerRunner "
    "(dockerd; `make images` first), as the images' user, with no network.",
)
@click.option(
    "--real",
    is_flag=True,
    help="The real-model demo (make demo-real): SmolLM2-135M-Instruct, imported "
    "into --base-model (default build/smollm2), fine-tuned on the project's conversations.",
)
def run_cmd(
    out_dir,
    pipeline,
    dataset,
    eval_dataset,
    rows,
    policy,
    config_path,
    train_config_path,
    eval_config_path,
    watermark_config_path,
    base_model_size,
    base_model,
    base_model_root,
    containers,
    real,
) -> None:
    """Run a pipeline locally through kfp.local (SubprocessRunner, or DockerRunner with --containers)."""
    from ..demo.local_run import format_summary, run_local

    if real:
        from ..demo.real_run import format_changes, run_real

        out_dir = "runs/demo-real" if out_dir == "runs/demo" else out_dir
        summary = run_real(out_dir, base_model or os.path.join("build", "smollm2"), containers)
        click.echo(format_summary(summary) + format_changes(summary["changes"]))
        return

    data_config = open(config_path, encoding="utf-8").read() if config_path else ""
    train_config = open(train_config_path, encoding="utf-8").read() if train_config_path else None
    eval_config = open(eval_config_path, encoding="utf-8").read() if eval_config_path else ""
    watermark_config = open(watermark_config_path, encoding="utf-8").read() if watermark_config_path else None
    summary = run_local(
        out_dir,
        pipeline,
        rows,
        policy,
        data_config,
        dataset,
        train_config,
        base_model_size,
        eval_dataset=eval_dataset,
        eval_config=eval_config,
        watermark_config=watermark_config,
        containers=containers,
        base_model=base_model,
        base_model_root=base_model_root,
        ask_served=True,
    )
    click.echo(format_summary(summary))
