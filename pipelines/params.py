"""Every pipeline parameter once: name, type, default, the description the Kubeflow UI
shows, and which forms have it. The KFP forms (`release.py`) and the Argo form
(`argo.py`) take their parameters from here, so a name means the same thing everywhere.

Forms: `cluster` (compiled KFP IR, PipelineVersion, Argo) and `local` (kfp.local).
Settings that only make sense on one side exist only there: a local run names folders
on this machine, a cluster run names PVCs, GPUs and pod sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

CONFIG_HELP = (
    "Stage config as YAML or as one-line JSON, e.g. {}; empty for the defaults (every key: docs/reference.md, "
    "section {})."
)


@dataclass(frozen=True)
class Param:
    name: str
    default: str | None  # None: required
    help: str
    forms: tuple[str, ...] = ("cluster", "local")
    example: str = ""  # configs: a one-line JSON value the tests load with the stage's model


def _config(name: str, stage: str, example: str) -> Param:
    return Param(name, "", CONFIG_HELP.format(example, stage), example=example)


ALL = {
    p.name: p
    for p in [
        Param(
            "dataset_uri",
            None,
            "Raw SFT data (JSONL or gzip JSONL, or a folder of them, fields per data_config): "
            "an s3://, gs:// or minio:// URI the pipeline's object store can read.",
        ),
        Param("eval_dataset_uri", None, "Held-out prompts with reference responses (JSONL), same URI forms."),
        Param("model_uri", None, "URI of an earlier run's model artifact (a sealed Hugging Face folder)."),
        Param("model_root", None, "The model's Merkle root (64 hex digits); the model is refused unless it matches."),
        Param(
            "checkpoint_uri",
            None,
            "URI of an earlier run's checkpoints artifact; training resumes from the checkpoint in it whose "
            "Merkle root is checkpoint_root.",
        ),
        Param(
            "checkpoint_root",
            None,
            "The checkpoint's Merkle root (64 hex digits: the earlier run's checkpoints output's merkle_root); "
            "nothing is loaded from checkpoint_uri unless a checkpoint there verifies to it.",
        ),
        _config("data_config", "validate_dataset", '{"gate": {"max_reject_rate": 0.2}}'),
        Param(
            "pii_policy",
            "balanced",
            "PII policy: strict, balanced or permissive (docs/data-validation.md, 'PII policies').",
        ),
        Param(
            "data_engine",
            "",
            "How validate_dataset runs: local (one process), ray (byte-range shards as Ray tasks "
            "on a local Ray of data_config's ray.workers CPUs in the task's pod, or a KubeRay "
            "RayJob with ray.kuberay.enabled), the same outputs either way; empty: "
            "data_config's engine.",
        ),
        Param(
            "base_model_uri",
            "",
            "Your pretrained model to fine-tune: a Hugging Face folder sealed with `llmops "
            "model seal` (s3://, gs://, http(s) or a path on the release volume); empty builds "
            "the demo model.",
        ),
        Param(
            "base_model_root",
            "",
            "The base model's Merkle root as `llmops model seal` printed it; required with "
            "base_model_uri, and the model is refused unless it matches.",
        ),
        Param(
            "base_model_size",
            "demo",
            "Size of the demo base model built from the data when no base_model_uri is given: demo or tiny.",
        ),
        _config("train_config", "train_zero3", '{"steps": 200, "micro_batch": 8}'),
        _config("eval_config", "evaluate_llm", '{"gate": {"value": {"bertscore_f1": {"lower": 0.6}}}}'),
        _config("watermark_config", "verify_watermark", '{"delta": 3.0, "gamma": 0.25}'),
        _config("deploy_config", "triton_canary_deploy", '{"steps": [10, 50, 100]}'),
        Param(
            "baseline_release",
            "auto",
            "What this release is compared with: auto (the last promoted release, from "
            "promoted.json on the release volume, which the exit handler writes on "
            "promotion), none, or the path of a promoted.json. Drift (PSI) uses its data "
            "statistics and the blessing's change thresholds its metrics; a baseline "
            "that does not verify fails the stage. Pinned once per run (task "
            "pin-baseline), so cached stages are keyed by the release they compare "
            "with.",
        ),
        # cluster only
        Param(
            "gpu_type",
            "nvidia.com/gpu",
            "Accelerator resource name for training (the node label's resource).",
            ("cluster",),
        ),
        Param(
            "gpu_count", "1", "GPUs for the training pod; one DeepSpeed rank per GPU. 0 trains on CPU.", ("cluster",)
        ),
        Param("train_cpu", "8", "CPU request and limit of the training pod.", ("cluster",)),
        Param("train_memory", "64Gi", "Memory request and limit of the training pod.", ("cluster",)),
        Param("eval_cpu", "4", "CPU request and limit of the evaluation and watermark pods.", ("cluster",)),
        Param("eval_memory", "16Gi", "Memory request and limit of the evaluation and watermark pods.", ("cluster",)),
        Param(
            "deploy_cpu",
            "1",
            "CPU request and limit of the deploy pod (it drives the rollout; the model is served by KServe).",
            ("cluster",),
        ),
        Param("deploy_memory", "4Gi", "Memory request and limit of the deploy pod.", ("cluster",)),
        Param(
            "checkpoint_pvc",
            "llmops-checkpoints",
            "PVC (ReadWriteOnce or ReadWriteMany) for checkpoints; a "
            "folder per run, so a retried training task resumes.",
            ("cluster",),
        ),
        Param(
            "release_pvc",
            "llmops-release",
            "PVC (ReadWriteMany) for release records and lineage notes, a folder per run.",
            ("cluster",),
        ),
        # local only
        Param(
            "checkpoint_dir",
            "",
            "Folder for checkpoints that outlive the task (default: the task's output).",
            ("local",),
        ),
        Param("release_dir", "", "Folder for the release record and lineage notes.", ("local",)),
        Param("serving_state_dir", "", "Folder holding the promoted Triton repositories (local target).", ("local",)),
        Param("watermark_key_file", "", "File with the watermark key (default: $LLMOPS_WATERMARK_KEY).", ("local",)),
        Param(
            "signing_key_file",
            "",
            "PEM ECDSA P-256 private key that signs the model, the Triton repository and "
            "the release provenance (default: $LLMOPS_SIGNING_KEY; none: unsigned).",
            ("local",),
        ),
        Param(
            "signing_public_key_file",
            "",
            "Its PEM public key: deploy refuses a model or repository not signed by "
            "its pair (default: $LLMOPS_SIGNING_PUBLIC_KEY).",
            ("local",),
        ),
        # both forms
        Param(
            "pipeline_spec_sha256",
            "",
            "SHA-256 of the compiled pipeline spec this run uses, recorded in the "
            "release provenance (`llmops run submit` fills it in).",
        ),
    ]
}

# What each pipeline takes, in order (required first).
PIPELINE_PARAMS = {
    "release": [
        "dataset_uri",
        "eval_dataset_uri",
        "data_config",
        "pii_policy",
        "data_engine",
        "base_model_uri",
        "base_model_root",
        "base_model_size",
        "train_config",
        "eval_config",
        "watermark_config",
        "deploy_config",
        "baseline_release",
        "gpu_type",
        "gpu_count",
        "train_cpu",
        "train_memory",
        "eval_cpu",
        "eval_memory",
        "deploy_cpu",
        "deploy_memory",
        "checkpoint_pvc",
        "release_pvc",
        "checkpoint_dir",
        "release_dir",
        "serving_state_dir",
        "watermark_key_file",
        "signing_key_file",
        "signing_public_key_file",
        "pipeline_spec_sha256",
    ],
    "continue-training": [
        "dataset_uri",
        "eval_dataset_uri",
        "model_uri",
        "model_root",
        "checkpoint_uri",
        "checkpoint_root",
        "data_config",
        "pii_policy",
        "data_engine",
        "train_config",
        "eval_config",
        "watermark_config",
        "deploy_config",
        "baseline_release",
        "gpu_type",
        "gpu_count",
        "train_cpu",
        "train_memory",
        "eval_cpu",
        "eval_memory",
        "deploy_cpu",
        "deploy_memory",
        "checkpoint_pvc",
        "release_pvc",
        "checkpoint_dir",
        "release_dir",
        "serving_state_dir",
        "watermark_key_file",
        "signing_key_file",
        "signing_public_key_file",
        "pipeline_spec_sha256",
    ],
    "evaluate-deploy": [
        "model_uri",
        "model_root",
        "eval_dataset_uri",
        "eval_config",
        "watermark_config",
        "deploy_config",
        "baseline_release",
        "eval_cpu",
        "eval_memory",
        "deploy_cpu",
        "deploy_memory",
        "release_pvc",
        "release_dir",
        "serving_state_dir",
        "watermark_key_file",
        "signing_key_file",
        "signing_public_key_file",
        "pipeline_spec_sha256",
    ],
}


def for_pipeline(pipeline: str, form: str) -> list[Param]:
    return [ALL[n] for n in PIPELINE_PARAMS[pipeline] if form in ALL[n].forms]


def docstring(summary: str, params: list[Param]) -> str:
    """Google-style Args, which the KFP SDK turns into each parameter's UI description."""
    lines = [summary, "", "Args:"] + [f"    {p.name}: {p.help}" for p in params]
    return "\n".join(lines) + "\n"
