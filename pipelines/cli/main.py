"""The `llmops` command line. Every subcommand calls the same function as its KFP
component; errors are one line and an exit code, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
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
@click.argument("input_path", metavar="INPUT", type=click.Path())
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder for clean.jsonl, quarantine.jsonl, metrics.json, stats.json, report.md.",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="Stage config YAML (every key: docs/reference.md).",
)
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


@cli.command("base-model")
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


@cli.group()
def model() -> None:
    """Bring your own model: seal a Hugging Face folder so every stage can verify it."""


@model.command("seal")
@click.argument("model_dir", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--allow-pickle", is_flag=True, help="Accept pickled weights (.bin/.pt); loading them can run code.")
@click.option(
    "--pad-token",
    type=click.Choice(["eos"]),
    help="Set a missing pad token to the EOS token (saved in the tokenizer files before sealing).",
)
def model_seal(model_dir, allow_pickle, pad_token) -> None:
    """Check DIR (config, safetensors weights, tokenizer, chat template) and write its Merkle
    manifest; prints the root to pin (`llmops run --base-model DIR`, `base_model_root`)."""
    from kfp_llmops.components.training.model_folder import seal_model_folder

    click.echo(seal_model_folder(model_dir, allow_pickle, pad_token))


@model.command("import")
@click.option(
    "--gguf",
    "gguf_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="A GGUF model file (llama, qwen2, mistral, ...: what transformers can dequantize).",
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="The Hugging Face folder to write (fp32 safetensors, tokenizer, chat template).",
)
@click.option("--expect-root", help="Refuse the result unless its Merkle root is this one.")
def model_import(gguf_path, out_dir, expect_root) -> None:
    """Import a GGUF model as a sealed Hugging Face folder; prints its root."""
    from kfp_llmops.components.training.gguf_import import import_gguf

    click.echo(import_gguf(gguf_path, out_dir, expect_root))


@model.command("keygen")
@click.option(
    "--private-key",
    required=True,
    type=click.Path(dir_okay=False),
    help="Where the PEM private key goes (owner-only; store it as a Secret, never in YAML).",
)
@click.option("--public-key", required=True, type=click.Path(dir_okay=False), help="Where the PEM public key goes.")
def model_keygen(private_key, public_key) -> None:
    """A new ECDSA P-256 key pair for model-signing signatures and release attestations."""
    from kfp_llmops.components.common import signing

    signing.generate_keys(private_key, public_key)
    click.echo(f"wrote {private_key} (private, mode 600) and {public_key}; key id {signing.key_id(public_key)}")


@model.command("sign")
@click.argument("model_dir", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--private-key", required=True, type=click.Path(dir_okay=False), help="PEM ECDSA P-256 private key.")
@click.option("--signature", type=click.Path(dir_okay=False), help="Where the signature goes (default DIR/model.sig).")
@click.option(
    "--hash",
    "hash_name",
    type=click.Choice(["sha256", "blake3"]),
    default="sha256",
    show_default=True,
    help="Per-file digest; `model_signing verify key` (1.1.1) checks sha256 signatures only.",
)
@click.option(
    "--certificate",
    type=click.Path(dir_okay=False),
    help="Certificate mode: the private key's signing certificate (KeyUsage digitalSignature or code signing).",
)
@click.option(
    "--certificate-chain",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Certificate mode: the certificates up to the root (repeat).",
)
def model_sign(model_dir, private_key, signature, hash_name, certificate, certificate_chain) -> None:
    """Sign every file of DIR with OpenSSF model-signing (a key, or a key with its
    certificate; offline); prints the folder's model-signing digest.
    `model_signing verify key` (or `verify certificate`) checks it."""
    from kfp_llmops.components.common import signing

    click.echo(signing.sign_folder(model_dir, private_key, signature, hash_name, certificate, tuple(certificate_chain)))


@model.command("verify")
@click.argument("model_dir", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--public-key", type=click.Path(dir_okay=False), help="PEM public key of the signer.")
@click.option(
    "--certificate-chain",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Or certificate mode: the chain to trust (repeat).",
)
@click.option("--signature", type=click.Path(dir_okay=False), help="The signature (default DIR/model.sig).")
def model_verify(model_dir, public_key, certificate_chain, signature) -> None:
    """Check DIR against its model-signing signature (exit 2 naming what failed)."""
    from kfp_llmops.components.common import signing

    if bool(public_key) == bool(certificate_chain):
        raise LlmopsError("give exactly one of --public-key and --certificate-chain")
    stated = signing.verify_folder(model_dir, public_key, signature, tuple(certificate_chain))
    click.echo(
        f"{model_dir}: signature verifies ({len(stated['files'])} files, {stated['hash']}, digest {stated['digest']})"
    )


@cli.command("train")
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
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="Training config YAML.")
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


@cli.command("eval")
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
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="Evaluation config YAML.")
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


@cli.command("bertscore-baseline")
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


@cli.group()
def watermark() -> None:
    """Stage 4: KGW text watermark: detection and verification."""


@watermark.command("detect")
@click.argument("texts", metavar="FILE", type=click.Path(dir_okay=False))
@click.option("--key-file", help="Watermark key file (else $LLMOPS_WATERMARK_KEY or the mounted Secret).")
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
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="Watermark config YAML.")
@click.option("--key-file", help="Watermark key file (else $LLMOPS_WATERMARK_KEY or the mounted Secret).")
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

    decoding = _blessed(blessing, None)[1] if blessing else None
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


@cli.group()
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


@cli.group()
def deploy() -> None:
    """Stage 5: Triton model repository, canary rollout with SLA analysis and rollback."""


def _blessed(blessing: str | None, blessed_root: str | None):
    """(the blessed root, the decoding it was judged under, the production model it was
    judged against) from blessing.json, or the root given alone (then evaluation's default
    decoding, and no comparison known)."""
    from kfp_llmops.components.common.decoding import Decoding

    if blessing:
        try:
            with open(blessing, encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError) as exc:
            raise LlmopsError(f"{blessing}: unreadable blessing: {exc}") from None
        if not data.get("blessed"):
            raise LlmopsError(f"{blessing}: the model was not blessed; refusing to deploy")
        if blessed_root and blessed_root != data.get("model_root"):
            raise LlmopsError(f"--blessed-root {blessed_root} disagrees with {blessing}")
        return data.get("model_root"), Decoding.from_record(data, blessing), data.get("compared_with")
    return blessed_root, Decoding(), None


@deploy.command("setup")
def deploy_setup() -> None:
    """Create the serving environment the local Triton servers run model.py in."""
    from kfp_llmops.components.deploy.serving_env import ensure_env, triton_paths

    path = ensure_env()
    triton_paths()
    click.echo(f"serving environment ready: {path}")


@deploy.command("repository")
@click.option("--model", "model_dir", required=True, type=click.Path(file_okay=False))
@click.option("--blessing", type=click.Path(dir_okay=False), help="blessing.json from evaluate_llm.")
@click.option("--blessed-root", help="The blessed model's Merkle root (instead of --blessing).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="Deploy config YAML.")
@click.option("--state", "state_dir", default="runs/serving", show_default=True, help="Local deployment state.")
@click.option(
    "--watermark",
    "watermark_record",
    type=click.Path(dir_okay=False),
    help="metrics.json of `llmops watermark verify`: serve with the parameters it verified "
    "(required unless the config sets watermark.enabled: false).",
)
@click.option(
    "--signing-key",
    type=click.Path(dir_okay=False),
    help="Sign the repository with this PEM private key (else $LLMOPS_SIGNING_KEY; neither: unsigned).",
)
def deploy_repository(
    model_dir, blessing, blessed_root, out_dir, config_path, state_dir, watermark_record, signing_key
) -> None:
    """Build a sealed Triton model repository from exactly the blessed model."""
    from kfp_llmops.components.common import signing
    from kfp_llmops.components.deploy import DeployConfig, build_repository, costed_decoding, watermark_params

    root, decoding, _ = _blessed(blessing, blessed_root)
    built = build_repository(
        model_dir,
        root,
        out_dir,
        DeployConfig.load(config_path),
        state_dir,
        watermark_params(watermark_record),
        signing.key_file(signing_key),
        decoding,
        costed_decoding(watermark_record),
    )
    click.echo(
        f"{out_dir}: {built['model_name']} version {built['version']}, repository root "
        f"{built['repository_root']}, model root {built['model_root']}"
    )


@deploy.command("canary")
@click.option("--repository", "repo_dir", type=click.Path(file_okay=False), help="A sealed repository.")
@click.option("--model", "model_dir", type=click.Path(file_okay=False), help="Or a model folder to build one from.")
@click.option("--blessing", type=click.Path(dir_okay=False), help="blessing.json from evaluate_llm.")
@click.option("--blessed-root", help="The blessed model's Merkle root (instead of --blessing).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option(
    "--state",
    "state_dir",
    default="runs/serving",
    show_default=True,
    help="Local deployment state: the promoted repository and its predecessor.",
)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="Deploy config YAML.")
@click.option("--key-file", help="Watermark key file (else $LLMOPS_WATERMARK_KEY or the mounted Secret).")
@click.option("--drill-failure-rate", type=float, help="Rehearsal: the canary fails this fraction of requests.")
@click.option("--drill-latency-ms", type=float, help="Rehearsal: the canary adds this latency per request.")
@click.option("--drill-first-token-ms", type=float, help="Rehearsal: the canary's first token comes this much later.")
@click.option("--drill-token-ms", type=float, help="Rehearsal: every token of the canary comes this much later.")
@click.option(
    "--watermark",
    "watermark_record",
    type=click.Path(dir_okay=False),
    help="metrics.json of `llmops watermark verify`: serve with the parameters it verified "
    "(required unless the config sets watermark.enabled: false).",
)
@click.option(
    "--public-key",
    type=click.Path(dir_okay=False),
    help="Refuse a repository (and, with --model, a "
    "model) not signed by this key's pair (else $LLMOPS_SIGNING_PUBLIC_KEY).",
)
@click.option(
    "--signing-key",
    type=click.Path(dir_okay=False),
    help="With --model: sign the repository built (else $LLMOPS_SIGNING_KEY).",
)
def deploy_canary(
    repo_dir,
    model_dir,
    blessing,
    blessed_root,
    out_dir,
    state_dir,
    config_path,
    key_file,
    drill_failure_rate,
    drill_latency_ms,
    drill_first_token_ms,
    drill_token_ms,
    watermark_record,
    public_key,
    signing_key,
) -> None:
    """Roll a repository out progressively; exit 0 promoted, 1 rolled back, 2 bad input."""
    from kfp_llmops.components.deploy import (
        DeployConfig,
        build_repository,
        costed_decoding,
        deploy,
        stage_result,
        watermark_params,
    )

    cfg = DeployConfig.load(
        config_path,
        {
            "drill.failure_rate": drill_failure_rate,
            "drill.added_latency_ms": drill_latency_ms,
            "drill.first_token_latency_ms": drill_first_token_ms,
            "drill.token_latency_ms": drill_token_ms,
        },
    )
    root, decoding, compared_with = _blessed(blessing, blessed_root)
    if bool(repo_dir) == bool(model_dir):
        raise LlmopsError("give exactly one of --repository and --model")
    from kfp_llmops.components.common import signing
    from kfp_llmops.components.deploy.rollout_lock import rollout_lock

    public_key = signing.key_file(public_key, public=True)
    if watermark_record and not model_dir:
        raise LlmopsError("--watermark applies when building from --model; a sealed repository keeps its own")
    with rollout_lock(cfg, state_dir, click.echo):  # the version numbered is the one rolled out
        if model_dir:
            if public_key:
                signing.verify_folder(model_dir, public_key)
            repo_dir = os.path.join(out_dir, "repository")
            build_repository(
                model_dir,
                root,
                repo_dir,
                cfg,
                state_dir,
                watermark_params(watermark_record),
                signing.key_file(signing_key),
                decoding,
                costed_decoding(watermark_record),
            )
        record = deploy(
            repo_dir,
            root,
            out_dir,
            cfg,
            state_dir,
            key_file,
            log=click.echo,
            public_key=public_key,
            compared_with=compared_with,
        )
    click.echo(f"decision={record['decision']} version={record['version']} reason: {record['reason']}")
    click.echo(f"record {os.path.join(out_dir, 'record.json')}, report {os.path.join(out_dir, 'report.html')}")
    if cfg.fail_on_rollback:
        from kfp_llmops.components.common.contract import raise_unless_passed

        raise_unless_passed(stage_result(record))


@deploy.command("serve")
@click.option(
    "--state",
    "state_dir",
    default="runs/serving",
    show_default=True,
    help="Local deployment state whose stable version is served.",
)
@click.option("--port", default=0, show_default=True, help="nginx's port (0: a free one).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--key-file", help="Watermark key file (else $LLMOPS_WATERMARK_KEY).")
@click.option(
    "--api-keys",
    "api_keys",
    type=click.Path(dir_okay=False),
    help="API keys clients must send (Authorization: Bearer), one per line; read again when it changes. "
    "Default: none on a loopback --host; elsewhere a key made in STATE/api-keys.",
)
@click.option(
    "--no-api-keys", is_flag=True, help="Ask no API key even on a --host others reach (anyone there is answered)."
)
@click.option(
    "--public-key",
    type=click.Path(dir_okay=False),
    help="Refuse to serve a promoted repository not signed by this key's pair (else $LLMOPS_SIGNING_PUBLIC_KEY).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="Deploy config YAML: its serving, front_door and local sections (bounds, startup timeout).",
)
def deploy_serve(state_dir, port, host, key_file, api_keys, no_api_keys, public_key, config_path) -> None:
    """Serve the promoted model (Triton and its OpenAI-compatible API behind nginx, its
    engine and watermark as promoted) in the foreground; the first line printed starts
    with the URL; Ctrl-C or SIGTERM stops everything."""
    from kfp_llmops.components.deploy import DeployConfig
    from kfp_llmops.components.deploy.local_target import serve

    if api_keys and no_api_keys:
        raise click.UsageError("--api-keys and --no-api-keys: give one")
    cfg = DeployConfig.load(config_path)
    keys = None if no_api_keys else (api_keys or "")
    from kfp_llmops.components.common import signing

    public_key = signing.key_file(public_key, public=True)
    announce = lambda line: click.echo(line)  # noqa: E731
    serve(state_dir, port, host, key_file, announce=announce, cfg=cfg, api_keys=keys, public_key=public_key)


@deploy.command("render")
@click.option("--repository-root", required=True, help="Root of the repository to roll out.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="Deploy config YAML (target, cluster).")
@click.option("--target", type=click.Choice(["kserve", "gateway"]), default="kserve", show_default=True)
def deploy_render(repository_root, config_path, target) -> None:
    """Print the manifests the cluster target applies at each step (YAML stream)."""
    from kfp_llmops.components.deploy import DeployConfig
    from kfp_llmops.components.deploy.cluster import rollout_manifests, to_yaml

    cfg = DeployConfig.load(config_path, {"target": target})
    steps = rollout_manifests(cfg, repository_root)
    click.echo(to_yaml([m for _, m in steps]), nl=False)


@deploy.command("undo")
@click.option("--state", "state_dir", default="runs/serving", show_default=True)
def deploy_undo(state_dir) -> None:
    """One-step rollback of the last local promotion (previous/ becomes stable/)."""
    from kfp_llmops.components.deploy.local_target import undo

    state = undo(state_dir)
    click.echo(f"stable is version {state['stable']['version']} again (root {state['stable']['repository_root']})")


@cli.group()
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


@cli.group()
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


@cli.command("compile")
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


@cli.command("submit")
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


@cli.group("images")
def images_group() -> None:
    """Build the stage images, load them into dockerd, push them to your registry."""


@images_group.command("build")
@click.option(
    "--base-source",
    type=click.Choice(["auto", "pinned", "debian"]),
    default="auto",
    show_default=True,
    help="pinned: the python:3.11-slim digest (needs a registry); debian: a Python 3.11 base "
    "bootstrapped from Debian packages; auto: pinned when a registry answers.",
)
@click.option(
    "--stage",
    "stages",
    multiple=True,
    type=click.Choice(["base", "data", "train", "eval", "deploy"]),
    help="Only these images (repeatable; default all).",
)
@click.option("--load/--no-load", default=True, show_default=True, help="Also load them into dockerd.")
def images_build(base_source, stages, load) -> None:
    """Build (or reuse, when built from the same sources) the stage images with podman."""
    from ..containers import build, docker_ready, load_into_docker

    report = build(base_source, list(stages) or None)
    for r in report.values():
        how = "reused" if r["reused"] else f"built in {r['seconds']:.0f} s"
        click.echo(f"{r['image']:<40} {r['bytes'] / 1e6:7.0f} MB  {how}")
    if load:
        docker_ready(start=True)
        load_into_docker(list(stages) or None)
        click.echo("loaded into dockerd")


@images_group.command("check")
def images_check() -> None:
    """Exit 0 when dockerd has every stage image, built from this tree."""
    from ..containers import check_runnable, docker_ready

    docker_ready()
    check_runnable()
    click.echo("every stage image is in dockerd and built from this tree")


@images_group.command("push")
@click.option("--registry", required=True, envvar="LLMOPS_REGISTRY", help="Target registry (or $LLMOPS_REGISTRY).")
@click.option("--tag", envvar="LLMOPS_IMAGE_TAG", help="Tag (default: the package version).")
@click.option(
    "--digests",
    "digests_file",
    type=click.Path(dir_okay=False),
    default="build/images/digests.json",
    show_default=True,
    help="Where to write {stage: digest} for `llmops compile --digests`.",
)
def images_push(registry, tag, digests_file) -> None:
    """Tag and push every stage image; write their digests."""
    from ..containers import push

    os.makedirs(os.path.dirname(os.path.abspath(digests_file)), exist_ok=True)
    push(registry, tag, digests_file)
    click.echo(f"digests: {digests_file} (llmops compile --registry {registry} --digests {digests_file} --out DIR)")


@cli.command("run")
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
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False),
    help="Data-validation config YAML passed to the pipeline.",
)
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


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="llmops", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:
        return int(exc.code or 0)
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
        from kfp_llmops.components.common.errors import environment_problem

        if os.environ.get("LLMOPS_DEBUG") == "1":
            raise
        problem = environment_problem(exc)
        if problem is not None:  # a full disk is the machine's problem, not an internal error
            click.echo(f"error: {problem}", err=True)
            return problem.exit_code
        click.echo(f"internal error: {type(exc).__name__}: {exc} (LLMOPS_DEBUG=1 shows the traceback)", err=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
