"""Run one stage of the release pipeline without the KFP backend, through the same
`run_component` entry points the KFP components call. Artifacts are files or folders
under a work folder (a PVC in Argo), each with a `<name>.metadata.json` beside it, so
the next stage sees the Merkle roots exactly as it would from KFP metadata. This is what
the standalone Argo WorkflowTemplate (`llmops compile --target argo`) runs."""

from __future__ import annotations

import json
import os

from kfp_llmops.components.common import atomic, baseline, records
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.fetch import fetch


class FileArtifact:
    """The slice of a KFP artifact the stages use: path, metadata, log_metric."""

    def __init__(self, path: str):
        self.path = self.uri = path
        sidecar = f"{path}.metadata.json"
        self.metadata = json.load(open(sidecar, encoding="utf-8")) if os.path.exists(sidecar) else {}

    def log_metric(self, key: str, value: float) -> None:
        self.metadata[key] = value

    def save(self) -> None:
        with open(f"{self.path}.metadata.json", "w", encoding="utf-8") as handle:
            json.dump(self.metadata, handle, indent=2, sort_keys=True, default=str)


def _inputs(work: str, stage: str, name: str) -> FileArtifact:
    path = os.path.join(work, stage, name)
    if not os.path.exists(path):
        raise InputError(f"{path}: missing; did stage {stage} run in this work folder?")
    return FileArtifact(path)


def _imported(p: dict, work: str, key: str, name: str, root_key: str | None = None) -> FileArtifact:
    art = FileArtifact(fetch(p[key], work, name))
    if root_key:
        art.metadata["merkle_root"] = p.get(root_key, "")
    return art


def pinned_baseline(work: str, release_dir: str, setting: str) -> str:
    """The promoted release this run compares with, pinned once per work folder (one per
    workflow) as the KFP DAG's pin-baseline task does: validate and evaluate compare with
    the same release even when another run promotes between them."""
    path = os.path.join(work, "baseline.pin")
    if not os.path.exists(path):
        atomic.write_text(path, baseline.pin(release_dir, setting))
    with open(path, encoding="utf-8") as handle:
        return handle.read().strip()


def _run(stage: str, work: str, p: dict, out) -> object:
    from kfp_llmops.components import data_validation, deploy, evaluation, release, training, watermark

    rd = p.get("release_dir", "")

    def model() -> FileArtifact:
        """The model trained in this run, else the imported one (evaluate-deploy)."""
        if os.path.exists(os.path.join(work, "train_zero3", "model")) or not p.get("model_uri"):
            return _inputs(work, "train_zero3", "model")
        return _imported(p, work, "model_uri", "model", "model_root")

    if stage == "validate_dataset":  # what the KFP DAG's pin-baseline and file-validate-note tasks do
        note, stats = out("note"), out("stats")
        passed = data_validation.run_component(
            fetch(p["dataset_uri"], work, "dataset"),
            p.get("data_config", ""),
            p.get("pii_policy", "balanced"),
            None,
            out("clean"),
            out("quarantine"),
            stats,
            out("metrics"),
            out("report"),
            note,
            pinned_baseline(work, rd, p.get("baseline_release", "auto")),
            engine=p.get("data_engine", ""),
        )
        if rd:
            records.file_note(rd, note.path, stats.path)
        return passed
    if stage == "build_base_model":
        return training.build_base_component(
            _inputs(work, "validate_dataset", "clean"),
            out("base_model"),
            p.get("base_model_size", "demo"),
            rd,
            p.get("base_model_uri", ""),
            p.get("base_model_root", ""),
        )
    if stage == "train_zero3":
        # continue-training: the imported model and checkpoints; release: the demo base model
        base = (
            _imported(p, work, "model_uri", "model", "model_root")
            if p.get("model_uri")
            else _inputs(work, "build_base_model", "base_model")
        )
        resume = _imported(p, work, "checkpoint_uri", "checkpoints") if p.get("checkpoint_uri") else None
        return training.run_component(
            _inputs(work, "validate_dataset", "clean"),
            base,
            p.get("train_config", ""),
            resume,
            p.get("checkpoint_dir", ""),
            out("model"),
            out("checkpoints"),
            out("metrics"),
            out("report"),
            out("train_log"),
            rd,
            p.get("gpu_count", "0"),
            p.get("signing_key_file", ""),
        )
    if stage == "evaluate_llm":
        note = out("note")
        trained = os.path.exists(os.path.join(work, "train_zero3", "model"))
        base = None  # what training started from: the forgetting check's base
        if trained and os.path.exists(os.path.join(work, "build_base_model", "base_model")):
            base = _inputs(work, "build_base_model", "base_model")
        elif trained and p.get("model_uri"):
            base = _imported(p, work, "model_uri", "model", "model_root")
        blessed = evaluation.run_component(
            model(),
            FileArtifact(fetch(p["eval_dataset_uri"], work, "eval_dataset")),
            None,
            p.get("eval_config", ""),
            out("responses"),
            out("metrics"),
            out("blessing"),
            out("report"),
            note,
            pinned_baseline(work, rd, p.get("baseline_release", "auto")),
            base_model=base,
        )
        if rd:
            records.file_note(rd, note.path)
        return blessed
    if stage == "verify_watermark":
        return watermark.run_component(
            model(),
            FileArtifact(fetch(p["eval_dataset_uri"], work, "eval_dataset")),
            p.get("watermark_config", ""),
            p.get("watermark_key_file", ""),
            out("watermarked"),
            out("metrics"),
            out("report"),
            rd,
            _inputs(work, "evaluate_llm", "blessing"),
        )
    if stage == "triton_canary_deploy":
        return deploy.run_component(
            model(),
            _inputs(work, "evaluate_llm", "blessing"),
            p.get("deploy_config", ""),
            p.get("watermark_key_file", ""),
            p.get("serving_state_dir", ""),
            out("repository"),
            out("record"),
            out("metrics"),
            out("report"),
            rd,
            p.get("default_target", "local"),
            _inputs(work, "verify_watermark", "watermarked"),
            p.get("signing_key_file", ""),
            p.get("signing_public_key_file", ""),
        )
    if stage == "release_record":
        return release.run_component(
            {
                "state": p.get("status", "UNKNOWN"),
                "pipeline_job_resource_name": p.get("run"),
                "error": p.get("error") or None,
            },
            rd,
            out("record"),
            out("report"),
            out("provenance"),
            p.get("signing_key_file", ""),
            p.get("pipeline_spec_sha256", ""),
        )
    raise InputError(f"unknown stage {stage!r}")


STAGES = [s.name for s in records.STAGES] + ["release_record"]


def run_stage(stage: str, work: str, params: dict) -> str:
    """Run `stage`; outputs under `<work>/<stage>/`; the return value in `<work>/<stage>/result`."""
    if stage not in STAGES:
        raise InputError(f"unknown stage {stage!r}; one of {', '.join(STAGES)}")
    folder = os.path.join(work, stage)
    os.makedirs(folder, exist_ok=True)
    made: list[FileArtifact] = []

    def out(name: str) -> FileArtifact:
        art = FileArtifact(os.path.join(folder, name))
        made.append(art)
        return art

    try:
        value = _run(stage, work, params, out)
    finally:
        for art in made:
            if os.path.exists(art.path):
                art.save()
    text = json.dumps(value) if isinstance(value, bool) else str(value)
    with open(os.path.join(folder, "result"), "w", encoding="utf-8") as handle:
        handle.write(text)
    return text
