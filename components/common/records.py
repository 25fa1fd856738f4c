"""What each stage records about a run, typed: the stage table (names, KFP task names,
record models) that the release record, `llmops lineage verify`, the Argo runner and the
local summary share, and the notes each stage writes into the release folder (a PVC on
a cluster, a local folder in kfp.local) for the exit handler's release record.

A note is one JSON file per stage, `<release_dir>/stages/<stage>.json`, written atomically;
reading one back validates it against its stage's model, so a renamed or missing field is
an error that names the file and the field, not a silent None.

The stages KFP may cache (validate_dataset, evaluate_llm) never touch the release folder:
a cached task does not run, so a write there would be missing from the next run's record.
They write their note into an output artifact instead, and a small uncached task files it
(`file_note`), with the data statistics the next release's drift check reads.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import atomic, merkle
from .errors import InputError


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Artifact(_Record):
    root: str | None = None
    path: str | None = None


class CleanData(Artifact):
    merkle_file: str = "clean.jsonl"
    rows: int = 0
    chunk_size: int = merkle.DEFAULT_CHUNK_SIZE


class Signed(Artifact):
    signed_sha256: str | None = Field(None, description="model-signing's SHA-256 of the folder, when signed.")


class ModelOut(Signed):
    checkpoint_root: str | None = None


class CheckpointsOut(Artifact):
    tag: str | None = None


class BlessingOut(Artifact):
    blessed: bool = False


class RepositoryOut(Signed):
    version: int | None = None
    weights: str | None = Field(None, description="The model folder inside the repository, relative to it.")


class StageRecord(_Record):
    """Fields every stage has; `result` is the stage's verdict in words."""

    stage: str
    result: str
    reason: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    params: dict[str, str] = Field(
        default_factory=dict, description="The pipeline parameters the stage was given (configs, URIs; never keys)."
    )


class _Model(_Record):
    model_root: str | None = None


class ValidateOutputs(_Record):
    clean: CleanData
    stats: Artifact | None = Field(
        None,
        description="The data statistics (root: their SHA-256), a copy in the "
        "release folder: the next release's drift reference.",
    )


class ValidateDataset(StageRecord):
    stage: Literal["validate_dataset"] = "validate_dataset"
    result: Literal["passed", "failed"]
    outputs: ValidateOutputs


class BaseModelInputs(_Record):
    dataset_root: str | None = None
    base_model_uri: str | None = None  # a user's model, else the demo model was built


class BaseModelOutputs(_Record):
    base_model: Artifact


class BuildBaseModel(StageRecord):
    stage: Literal["build_base_model"] = "build_base_model"
    result: Literal["built", "imported"] = "built"
    inputs: BaseModelInputs
    outputs: BaseModelOutputs


class TrainInputs(_Record):
    dataset_root: str | None = None
    base_model_root: str | None = None


class TrainOutputs(_Record):
    model: ModelOut
    checkpoints: CheckpointsOut


class TrainZero3(StageRecord):
    stage: Literal["train_zero3"] = "train_zero3"
    result: Literal["trained"] = "trained"
    inputs: TrainInputs
    outputs: TrainOutputs


class EvaluateOutputs(_Record):
    blessing: BlessingOut


class EvaluateLlm(StageRecord):
    stage: Literal["evaluate_llm"] = "evaluate_llm"
    result: Literal["blessed", "not blessed"]
    inputs: _Model
    outputs: EvaluateOutputs


class WatermarkOutputs(_Record):
    watermarked: Artifact = Field(default_factory=Artifact)
    kgw: dict = Field(default_factory=dict, description="The KGW parameters verified (common.watermark.KGW).")


class VerifyWatermark(StageRecord):
    stage: Literal["verify_watermark"] = "verify_watermark"
    result: Literal["verified", "not verified"]
    inputs: _Model
    outputs: WatermarkOutputs = Field(default_factory=WatermarkOutputs)


class DeployInputs(_Record):
    model_root: str | None = None
    blessed_root: str | None = None
    production_root: str | None = Field(
        None,
        description="The model serving when the rollout began (what a "
        "promotion replaced; promoted.json is moved on only from it).",
    )
    compared_with: str | None = Field(
        None, description="The production release the blessing was judged against (its pin), when known."
    )


class DeployOutputs(_Record):
    repository: RepositoryOut
    serving_state: Artifact = Field(default_factory=Artifact)
    served_uri: str | None = Field(
        None,
        description="Where a cluster target serves the repository from (object storage or pvc://), under its root.",
    )
    production: Artifact = Field(
        default_factory=Artifact,
        description="The promoted model's copy on the release volume (the next run's win rate).",
    )


class TritonCanaryDeploy(StageRecord):
    stage: Literal["triton_canary_deploy"] = "triton_canary_deploy"
    result: Literal["promoted", "rolled_back"]
    inputs: DeployInputs
    outputs: DeployOutputs


@dataclass(frozen=True)
class Stage:
    name: str  # component and record name
    task: str  # KFP / Argo task name
    record: type[StageRecord]


# The run's stages in flow order: the one table the release record, lineage, the Argo
# runner and the local summary read.
STAGES = (
    Stage("validate_dataset", "validate-dataset", ValidateDataset),
    Stage("build_base_model", "build-base-model", BuildBaseModel),
    Stage("train_zero3", "train-zero3", TrainZero3),
    Stage("evaluate_llm", "evaluate-llm", EvaluateLlm),
    Stage("verify_watermark", "verify-watermark", VerifyWatermark),
    Stage("triton_canary_deploy", "triton-canary-deploy", TritonCanaryDeploy),
)
BY_NAME = {s.name: s for s in STAGES}
RELEASE_TASK = "release-record"  # the exit handler's task


def parse(data: dict, origin: str) -> StageRecord:
    """A stage record from its JSON; InputError naming `origin` and the field otherwise."""
    stage = BY_NAME.get(data.get("stage")) if isinstance(data, dict) else None
    if stage is None:
        raise InputError(f"{origin}: unknown stage {data.get('stage') if isinstance(data, dict) else data!r}")
    try:
        return stage.record.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise InputError(f"{origin}: {stage.name} record field {where}: {err['msg']}") from None


def write(path: str, record: StageRecord) -> None:
    atomic.write_json(path, record.model_dump(mode="json"), sort_keys=True)


def note(release_dir: str | None, record: StageRecord) -> None:
    """Write the stage's note atomically; no-op without a release folder."""
    if release_dir:
        write(os.path.join(release_dir, "stages", f"{record.stage}.json"), record)


def read(path: str) -> StageRecord:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: unreadable stage note: {exc}") from None
    return parse(data, path)


def file_note(release_dir: str, note_path: str, stats_path: str | None = None) -> StageRecord:
    """File a cached stage's note (an artifact it wrote) into the release folder. Data
    statistics named by the note are copied beside it, where the next release finds them
    whatever storage artifacts live in, and checked against the SHA-256 the note gives."""
    from .integrity import sha256_file

    record = read(note_path)
    stats = getattr(getattr(record, "outputs", None), "stats", None)
    if stats is not None:
        if not stats_path:
            raise InputError(f"{note_path}: the note names data statistics, but none were given to keep")
        got = sha256_file(stats_path)
        if got != stats.root:
            raise InputError(f"{stats_path}: SHA-256 {got}, the note {note_path} says {stats.root}")
        os.makedirs(release_dir, exist_ok=True)
        kept = os.path.join(release_dir, f"{record.stage}.stats.json")
        with open(stats_path, "rb") as handle:
            atomic.write_bytes(kept, handle.read())
        stats.path = os.path.abspath(kept)
    note(release_dir, record)
    return record


def read_notes(release_dir: str) -> dict[str, StageRecord]:
    """The notes in the release folder, in flow order."""
    folder = os.path.join(release_dir, "stages")
    found = {}
    if os.path.isdir(folder):
        for name in sorted(os.listdir(folder)):
            if name.endswith(".json") and not name.startswith("."):
                record = read(os.path.join(folder, name))
                found[record.stage] = record
    return {s.name: found[s.name] for s in STAGES if s.name in found}


# --- The local target's serving state: which repository serves as stable now ----------
# state.json is the one commit point: the repositories it names live under repos/<root>
# (each written whole before state.json names it), `stable` and `previous` are links to
# them for people, re-pointed after each commit; `served_dir` reads state.json itself.
SERVING_STATE = "state.json"
STABLE_DIR = "stable"  # a link to the repository the stable server loads
REPOS_DIR = "repos"


def served_dir(state_dir: str, role: str = "stable", state: dict | None = None) -> str | None:
    """The folder of the repository state.json names as `role` (stable or previous);
    None when it names none. `state`: the state.json already read, so both answers
    come from one reading."""
    rec = (read_serving_state(state_dir) if state is None else state).get(role)
    if not rec:
        return None
    stored = os.path.join(state_dir, REPOS_DIR, rec["repository_root"])
    return stored if os.path.isdir(stored) else os.path.join(state_dir, role)  # a folder from before repos/


def read_serving_state(state_dir: str) -> dict:
    """`{"stable": {...}, "previous": {...}}` of a local serving folder ({} when none)."""
    path = os.path.join(state_dir, SERVING_STATE)
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: unreadable deployment state: {exc}") from None


def write_serving_state(state_dir: str, state: dict) -> None:
    atomic.write_json(os.path.join(state_dir, SERVING_STATE), state, sort_keys=True)
