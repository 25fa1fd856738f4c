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


# Where a stage's `run_component` argument comes from when a runner without KFP (the Argo
# runner, `llmops stage run`) calls it; KFP wires the same names from the pipeline DAG.
@dataclass(frozen=True)
class Param:
    """A run parameter (`--param key=value`)."""

    key: str
    default: str = ""


@dataclass(frozen=True)
class Output:
    """An artifact this stage writes, `<work>/<stage>/<name>`."""

    name: str


@dataclass(frozen=True)
class Upstream:
    """An artifact an earlier stage of the run wrote, `<work>/<stage>/<name>`."""

    stage: str
    name: str


@dataclass(frozen=True)
class Fetched:
    """An artifact fetched from the URI the parameter `key` names, into `<work>/<name>`."""

    key: str
    name: str


@dataclass(frozen=True)
class Resolved:
    """A value the runner decides from what the run has (a trained or imported model, the
    pinned baseline, the run's status); `name` is the rule."""

    name: str


Source = Param | Output | Upstream | Fetched | Resolved


@dataclass(frozen=True)
class Stage:
    """One stage, and everything the runner, the CLI, the images and compile look up about
    it. Names only: `common` imports no stage, the layers above resolve them."""

    name: str  # component and record name
    task: str  # KFP / Argo task name
    record: type[StageRecord] | None  # its lineage note's model (None: writes none)
    package: str  # kfp_llmops.components.<package>
    image: str  # components/images.py: image(<image>)
    config: str = ""  # its config model in <package>.config ("": none)
    entry: str = "run_component"  # the KFP entry in <package>, keyword-only
    inputs: tuple[tuple[str, Source], ...] = ()  # entry argument -> where it comes from
    params: tuple[str, ...] = ()  # pipeline parameters its Argo task passes on


_RELEASE = Param("release_dir")
_BASELINE = Resolved("pinned_baseline")

# The run's stages in flow order: the one table the release record, lineage, the Argo
# runner, the reference docs and the local summary read.
STAGES = (
    Stage(
        "validate_dataset",
        "validate-dataset",
        ValidateDataset,
        "data_validation",
        "data",
        "DataValidationConfig",
        inputs=(
            ("raw", Fetched("dataset_uri", "dataset")),
            ("config", Param("data_config")),
            ("policy", Param("pii_policy", "balanced")),
            ("clean", Output("clean")),
            ("quarantine", Output("quarantine")),
            ("stats", Output("stats")),
            ("metrics", Output("metrics")),
            ("report", Output("report")),
            ("note", Output("note")),
            ("baseline_release", _BASELINE),
            ("engine", Param("data_engine")),
        ),
        params=("dataset_uri", "data_config", "pii_policy", "data_engine", "baseline_release"),
    ),
    Stage(
        "build_base_model",
        "build-base-model",
        BuildBaseModel,
        "training",
        "train",
        entry="build_base_component",
        inputs=(
            ("dataset", Upstream("validate_dataset", "clean")),
            ("base_model", Output("base_model")),
            ("size", Param("base_model_size", "demo")),
            ("release_dir", _RELEASE),
            ("base_model_uri", Param("base_model_uri")),
            ("base_model_root", Param("base_model_root")),
        ),
        params=("base_model_uri", "base_model_root", "base_model_size"),
    ),
    Stage(
        "train_zero3",
        "train-zero3",
        TrainZero3,
        "training",
        "train",
        "TrainConfig",
        inputs=(
            ("dataset", Upstream("validate_dataset", "clean")),
            ("base_model", Resolved("training_base")),
            ("config", Param("train_config")),
            ("resume_from", Resolved("imported_checkpoints")),
            ("checkpoint_dir", Param("checkpoint_dir")),
            ("model", Output("model")),
            ("checkpoints", Output("checkpoints")),
            ("metrics", Output("metrics")),
            ("report", Output("report")),
            ("train_log", Output("train_log")),
            ("release_dir", _RELEASE),
            ("gpus", Param("gpu_count", "0")),
            ("signing_key_file", Param("signing_key_file")),
        ),
        params=("train_config", "gpu_count", "model_uri", "model_root", "checkpoint_uri", "checkpoint_root"),
    ),
    Stage(
        "evaluate_llm",
        "evaluate-llm",
        EvaluateLlm,
        "evaluation",
        "eval",
        "EvalConfig",
        inputs=(
            ("model", Resolved("model")),
            ("eval_dataset", Fetched("eval_dataset_uri", "eval_dataset")),
            ("config", Param("eval_config")),
            ("responses", Output("responses")),
            ("metrics", Output("metrics")),
            ("blessing", Output("blessing")),
            ("report", Output("report")),
            ("note", Output("note")),
            ("baseline_release", _BASELINE),
            ("base_model", Resolved("forgetting_base")),
        ),
        params=("eval_dataset_uri", "eval_config", "model_uri", "model_root", "baseline_release"),
    ),
    Stage(
        "verify_watermark",
        "verify-watermark",
        VerifyWatermark,
        "watermark",
        "eval",
        "WatermarkConfig",
        inputs=(
            ("model", Resolved("model")),
            ("eval_dataset", Fetched("eval_dataset_uri", "eval_dataset")),
            ("config", Param("watermark_config")),
            ("key_file", Param("watermark_key_file")),
            ("watermarked", Output("watermarked")),
            ("metrics", Output("metrics")),
            ("report", Output("report")),
            ("release_dir", _RELEASE),
            ("blessing", Upstream("evaluate_llm", "blessing")),
        ),
        params=("eval_dataset_uri", "watermark_config", "model_uri", "model_root"),
    ),
    Stage(
        "triton_canary_deploy",
        "triton-canary-deploy",
        TritonCanaryDeploy,
        "deploy",
        "deploy",
        "DeployConfig",
        inputs=(
            ("model", Resolved("model")),
            ("blessing", Upstream("evaluate_llm", "blessing")),
            ("config", Param("deploy_config")),
            ("key_file", Param("watermark_key_file")),
            ("state_dir", Param("serving_state_dir")),
            ("repository", Output("repository")),
            ("record", Output("record")),
            ("metrics", Output("metrics")),
            ("report", Output("report")),
            ("release_dir", _RELEASE),
            ("default_target", Param("default_target", "local")),
            ("watermarked", Upstream("verify_watermark", "watermarked")),
            ("signing_key_file", Param("signing_key_file")),
            ("public_key_file", Param("signing_public_key_file")),
        ),
        params=("deploy_config", "model_uri", "model_root"),
    ),
)
RELEASE_TASK = "release-record"  # the exit handler's task
# The exit handler: the run's record, whatever happened, and its provenance.
RELEASE_STAGE = Stage(
    "release_record",
    RELEASE_TASK,
    None,
    "release",
    "base",
    inputs=(
        ("status", Resolved("run_status")),
        ("release_dir", _RELEASE),
        ("record", Output("record")),
        ("report", Output("report")),
        ("provenance", Output("provenance")),
        ("signing_key_file", Param("signing_key_file")),
        ("pipeline_spec_sha256", Param("pipeline_spec_sha256")),
    ),
    params=("pipeline_spec_sha256",),
)
BY_NAME = {s.name: s for s in STAGES}


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
