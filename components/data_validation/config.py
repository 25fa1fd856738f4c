"""The data-validation stage's one config model. Every threshold the gate reads is here."""

from __future__ import annotations

from enum import Enum
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kfp_llmops.components.common.config import StageConfig


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class FieldSpec(_Section):
    type: Literal["string", "messages"] = Field(
        "string",
        description="'messages': a conversation, a list of "
        "{role, content} turns (system, user, "
        "assistant) ending with the assistant's.",
    )
    required: bool = True
    min_chars: int = Field(1, ge=0, description="Least characters (of each turn, for messages).")
    max_chars: int = Field(16_000, ge=1, description="Most characters (of all turns together, for messages).")


class RecordFormat(_Section):
    """A record shape. A row matches the first format whose key fields it carries."""

    name: str
    fields: dict[str, FieldSpec]


def _default_formats() -> list[RecordFormat]:
    return [
        RecordFormat(
            name="sft", fields={"prompt": FieldSpec(max_chars=8_000), "response": FieldSpec(max_chars=16_000)}
        ),
        RecordFormat(name="text", fields={"text": FieldSpec(max_chars=32_000)}),
        RecordFormat(name="chat", fields={"messages": FieldSpec(type="messages", max_chars=32_000)}),
        RecordFormat(
            name="completion", fields={"prompt": FieldSpec(max_chars=8_000), "completion": FieldSpec(max_chars=16_000)}
        ),
    ]


class SchemaConfig(_Section):
    formats: list[RecordFormat] = Field(default_factory=_default_formats, min_length=1)
    allow_extra_fields: bool = True
    max_line_bytes: int = Field(1 << 20, ge=64, description="Longer lines are quarantined whole (line_too_long).")


class Policy(str, Enum):  # noqa: UP042 - StrEnum would change str(), which config dumps use
    strict = "strict"
    balanced = "balanced"
    permissive = "permissive"


class NamesConfig(_Section):
    """PERSON and ADDRESS detection (names.py); the NER model is needed only when enabled."""

    enabled: bool = True
    ner_model: str = Field(
        "bundled", description="Local spaCy model folder, or 'bundled' (en_core_web_sm 3.8.0 from the data extra)."
    )
    ner_sha256: str | None = Field(
        None, description="Pinned Merkle root of ner_model's folder; the bundled model's root is built in."
    )
    allow: list[str] = Field(
        default_factory=list, description="Names never redacted, e.g. public figures in encyclopaedic text."
    )
    ner_batch_size: int = Field(64, ge=1, le=4096)


class PiiConfig(_Section):
    policy: Policy = Policy.balanced
    names: NamesConfig = Field(default_factory=NamesConfig)
    # Overrides of the policy table (pii.POLICIES); None keeps the policy's value.
    max_density: float | None = Field(None, ge=0.0, le=1.0, description="Max PII findings per word of a record.")
    redact: list[str] | None = None
    quarantine_secrets: bool | None = None


class NearDupConfig(_Section):
    enabled: bool = False
    threshold: float = Field(0.85, gt=0.0, le=1.0, description="Estimated Jaccard similarity.")
    num_perm: int = Field(64, ge=8, le=512)
    shingle_words: int = Field(3, ge=1, le=10)


class DedupConfig(_Section):
    exact: bool = True
    near: NearDupConfig = Field(default_factory=NearDupConfig)


class DvcConfig(_Section):
    enabled: bool = False
    repo_dir: str | None = Field(None, description="DVC repository; created (no SCM) if missing.")
    remote_url: str | None = None
    remote_name: str = "storage"


class KubeRaySettings(_Section):
    """engine: ray on a cluster (rayjob.py): the task copies the input to a claim every
    Ray pod mounts, submits a KubeRay RayJob of the data image, follows it and reads the
    outputs back, verified."""

    enabled: bool = False
    namespace: str = Field("", description="Empty: the task's own namespace.")
    claim: str = Field("llmops-release", description="ReadWriteMany PVC the task and every Ray pod mount.")
    mount_path: str = Field("/mnt/release", description="Where the task and the Ray pods mount `claim`.")
    image: str = Field("", description="Ray pods' image; empty: this release's data image (Ray in its extra).")
    workers: int = Field(2, ge=0, le=1000, description="Worker pods beside the head.")
    head_cpu: str = "2"
    head_memory: str = "8Gi"
    worker_cpu: str = "4"
    worker_memory: str = "8Gi"
    service_account: str = Field("", description="The Ray pods' ServiceAccount; empty: the namespace's default.")
    timeout_s: int = Field(24 * 3600, ge=60, description="The RayJob's activeDeadlineSeconds.")
    poll_s: float = Field(10.0, gt=0, description="How often its status and log are read.")
    delete_on_success: bool = Field(True, description="Delete a finished RayJob; a failed one stays for inspection.")


class RayConfig(_Section):
    """engine: ray (ray_engine.py)."""

    workers: int = Field(
        2,
        ge=1,
        le=4096,
        description="CPUs of the local Ray this stage starts; on a cluster "
        "(address set) the cluster's own CPUs are used.",
    )
    address: str | None = Field(
        None,
        description="A running Ray cluster ('auto', 'ray://head:10001'); "
        "RAY_ADDRESS in the environment counts as set. None: a local Ray.",
    )
    shard_mb: int = Field(
        64,
        ge=1,
        le=65536,
        description="Most MiB of input per shard; smaller to give each worker four (a gzip file is one shard).",
    )
    partitions: int = Field(0, ge=0, le=4096, description="Hash partitions of the dedup shuffle; 0: one per worker.")
    kuberay: KubeRaySettings = Field(default_factory=KubeRaySettings)


class GateConfig(_Section):
    max_reject_rate: float = Field(0.05, ge=0.0, le=1.0, json_schema_extra={"gate": "<="})
    max_psi: float = Field(
        0.2,
        gt=0.0,
        description="Drift: PSI of each distribution against the reference statistics (was drift.psi_threshold).",
        json_schema_extra={"gate": "<="},
    )


class DataValidationConfig(StageConfig):
    schema_: SchemaConfig = Field(default_factory=SchemaConfig, alias="schema")
    pii: PiiConfig = Field(default_factory=PiiConfig)
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    gate: GateConfig = Field(default_factory=GateConfig)
    dvc: DvcConfig = Field(default_factory=DvcConfig)
    chunk_size: int = Field(1 << 20, ge=1024, description="Merkle chunk size of the clean data.")
    engine: Literal["local", "ray"] = Field(
        "local", description="'local': one process; 'ray': byte-range shards as Ray tasks, the same outputs."
    )
    ray: RayConfig = Field(default_factory=RayConfig)

    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_assignment=True)
    MOVED: ClassVar[dict[str, str]] = {"drift.psi_threshold": "gate.max_psi"}

    @model_validator(mode="after")
    def _check_bounds(self) -> DataValidationConfig:
        for fmt in self.schema_.formats:
            for name, spec in fmt.fields.items():
                if spec.min_chars > spec.max_chars:
                    raise ValueError(f"schema format {fmt.name!r} field {name!r}: min_chars exceeds max_chars")
        return self
