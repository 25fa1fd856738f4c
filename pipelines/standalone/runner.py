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

from .. import stages


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


class _Run:
    """One stage's call: its entry's arguments, each from where the stage table says."""

    def __init__(self, work: str, params: dict, out):
        self.work, self.p, self.out = work, params, out

    def _ran(self, stage: str, name: str) -> bool:
        return os.path.exists(os.path.join(self.work, stage, name))

    def _imported_model(self) -> FileArtifact:
        return _imported(self.p, self.work, "model_uri", "model", "model_root")

    # Resolved(name) rules
    def model(self) -> FileArtifact:
        """The model trained in this run, else the imported one (evaluate-deploy)."""
        if self._ran("train_zero3", "model") or not self.p.get("model_uri"):
            return _inputs(self.work, "train_zero3", "model")
        return self._imported_model()

    def training_base(self) -> FileArtifact:
        """continue-training: the imported model; release: the base model built in the run."""
        if self.p.get("model_uri"):
            return self._imported_model()
        return _inputs(self.work, "build_base_model", "base_model")

    def imported_checkpoints(self) -> FileArtifact | None:
        if not self.p.get("checkpoint_uri"):
            return None
        return _imported(self.p, self.work, "checkpoint_uri", "checkpoints", "checkpoint_root")

    def forgetting_base(self) -> FileArtifact | None:
        """What training started from (the forgetting check's base); None without training."""
        if not self._ran("train_zero3", "model"):
            return None
        if self._ran("build_base_model", "base_model"):
            return _inputs(self.work, "build_base_model", "base_model")
        return self._imported_model() if self.p.get("model_uri") else None

    def pinned_baseline(self) -> str:
        return pinned_baseline(self.work, self.p.get("release_dir", ""), self.p.get("baseline_release", "auto"))

    def run_status(self) -> dict:
        p = self.p
        return {
            "state": p.get("status", "UNKNOWN"),
            "pipeline_job_resource_name": p.get("run"),
            "error": p.get("error") or None,
        }

    def value(self, source: records.Source):
        if isinstance(source, records.Param):
            return self.p.get(source.key, source.default)
        if isinstance(source, records.Output):
            return self.out(source.name)
        if isinstance(source, records.Upstream):
            return _inputs(self.work, source.stage, source.name)
        if isinstance(source, records.Fetched):
            return FileArtifact(fetch(self.p[source.key], self.work, source.name))
        return getattr(self, source.name)()


def _run(stage: records.Stage, work: str, p: dict, out) -> object:
    run = _Run(work, p, out)
    result = stages.entry(stage)(**{name: run.value(source) for name, source in stage.inputs})
    rd = p.get("release_dir", "")
    note = dict(stage.inputs).get("note")
    if rd and note is not None:  # what the KFP DAG's file-*-note tasks do
        stats = os.path.join(work, stage.name, "stats")
        records.file_note(rd, os.path.join(work, stage.name, note.name), stats if os.path.exists(stats) else None)
    return result.value


STAGES = list(stages.BY_NAME)


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
        value = _run(stages.BY_NAME[stage], work, params, out)
    finally:
        for art in made:
            if os.path.exists(art.path):
                art.save()
    text = json.dumps(value) if isinstance(value, bool) else str(value)
    with open(os.path.join(folder, "result"), "w", encoding="utf-8") as handle:
        handle.write(text)
    return text
