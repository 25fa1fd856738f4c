"""The training stage's one config model: loop, optimizer schedule, checkpoints, and a
DeepSpeed config passthrough (ZeRO stage 3 unless you say otherwise)."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kfp_llmops.components.common.config import StageConfig
from kfp_llmops.components.common.watermark.weights import WeightWatermarkConfig


class LoraSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    r: int = Field(8, ge=1, description="Adapter rank.")
    alpha: float = Field(16.0, gt=0, description="Scale: the update is B·A·alpha/r.")
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] = Field(
        default_factory=list, description="Module names to adapt; empty: peft's default for the architecture."
    )


# Where the release pipeline mounts the checkpoint claim in the training task; the nodes
# of a multi-node run mount it at the same path.
CHECKPOINT_MOUNT = "/mnt/checkpoints"


class MultiNodeSettings(BaseModel):
    """More than one node: `train_zero3` runs the ranks as a Kubeflow Trainer TrainJob and
    waits for it; the run folder lies on a claim every node and the task mount at one path."""

    model_config = ConfigDict(extra="forbid")

    nodes: int = Field(1, ge=1, description="Nodes; 1 trains inside the task's own pod (torchrun).")
    gpus_per_node: int = Field(0, ge=0, description="GPUs per node (0: CPU ranks).")
    claim: str = Field(
        "llmops-checkpoints", description="ReadWriteMany PVC holding the run: inputs, checkpoints, the exported model."
    )
    mount_path: str = Field(
        CHECKPOINT_MOUNT, description="Where the task and every node mount `claim`; checkpoint_dir must lie under it."
    )
    runtime: str = Field(
        "kfp-llmops-deepspeed",
        description="TrainingRuntime in the job's namespace (MPI, the train image on every node; manifests/training).",
    )
    image: str = Field("", description="Trainer image; empty: this release's train image.")
    namespace: str = Field("", description="Empty: the task's own namespace.")
    service_account: str = "llmops-train"
    key_secret: str = Field(
        "llmops-watermark-key", description="Secret whose `key` the ranks get for the weight watermark."
    )
    cpu: str = "16"
    memory: str = "128Gi"
    timeout_s: int = Field(72 * 3600, ge=60, description="The TrainJob's activeDeadlineSeconds.")
    poll_s: float = Field(10.0, gt=0, description="How often its status and logs are read.")
    delete_on_success: bool = Field(
        True,
        description="Delete a finished TrainJob (its log is kept in ranks.log); a failed one stays for inspection.",
    )


# The settings a recipe gives the fields a config leaves unset. `scratch` is the demo
# model's, trained from random weights; `full` and `lora` fine-tune a pretrained model at the
# learning rates the field uses (TRL, Axolotl and LLaMA-Factory recipes: about 2e-5 for every
# weight, 2e-4 for adapters, a tenth of the steps warming up, cosine to zero).
RECIPES: dict[str, dict[str, Any]] = {
    "scratch": {"lr": 1.5e-3, "min_lr": 1.5e-4, "warmup_steps": 10, "seq_len": 64, "micro_batch": 8},
    "full": {"lr": 2e-5, "min_lr": 0.0, "warmup_ratio": 0.1, "seq_len": 1024, "micro_batch": 4},
    "lora": {"lr": 2e-4, "min_lr": 0.0, "warmup_ratio": 0.1, "seq_len": 1024, "micro_batch": 4},
}


class TrainConfig(StageConfig):
    recipe: Literal["scratch", "full", "lora"] | None = Field(
        None,
        description="Defaults for the fields left unset (RECIPES): scratch (random weights, the demo's), full "
        "(every weight, lr 2e-5) or lora (adapters, lr 2e-4); unset: scratch for a model "
        "build_base_model made, lora for a pretrained one.",
    )
    steps: int = Field(80, ge=1, description="Optimizer steps to reach (a resume continues to it).")
    micro_batch: int = Field(8, ge=1, description="Sequences per rank per micro-step (recipe).")
    grad_accum: int = Field(1, ge=1)
    seq_len: int = Field(
        64,
        ge=8,
        description="Longest example in tokens; longer ones are cut, and the share cut "
        "is reported (recipe; a pretrained model's is capped at its "
        "context). Batches are padded to their longest example only.",
    )
    lr: float = Field(1.5e-3, gt=0, description="Peak learning rate (recipe).")
    min_lr: float | None = Field(None, ge=0, description="Where the schedule ends (recipe).")
    warmup_steps: int = Field(10, ge=0, description="Linear warm-up (recipe; or warmup_ratio of the steps).")
    warmup_ratio: float | None = Field(None, ge=0, lt=1, description="Warm-up as a share of `steps` (recipe).")
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    weight_decay: float = Field(0.0, ge=0)
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    seed: int = 1234
    world_size: int = Field(
        2,
        ge=1,
        description="Ranks in all (torchrun --nproc_per_node on one node; "
        "nodes x gpus_per_node by default on several).",
    )
    checkpoint_interval: int = Field(20, ge=1, description="Save every N optimizer steps (and at the end).")
    keep_last: int = Field(3, ge=1, description="Committed checkpoints to keep.")
    chunk_size: int = Field(1 << 20, ge=4096, description="Merkle chunk size of checkpoint files.")
    durable: bool = Field(True, description="fsync files and directories on commit.")
    mask_prompt: bool = Field(True, description="Loss on the response tokens only.")
    packing: bool = Field(
        False,
        description="Fill each sequence with several examples (in the sampler's order), "
        "each attending only to itself: fewer padding tokens per step.",
    )
    threads_per_rank: int = Field(1, ge=1)
    return_freed_memory: bool = Field(
        True,
        description="Host allocations of 1 MiB or more are mapped, so the layers "
        "ZeRO-3 gathers and frees go back to the system: a rank's "
        "first step peaked at 2.84-2.89 times the model per rank "
        "instead of 3.03-3.06 (bench_load, 309.6 M on 2 ranks); "
        "costs 10-25 % of a CPU step.",
    )
    lora: LoraSettings = Field(
        default_factory=LoraSettings,
        description="Train low-rank adapters only (peft); merged into the weights at export.",
    )
    weight_watermark: WeightWatermarkConfig = Field(
        default_factory=WeightWatermarkConfig, description="Uchida regularizer; key from the environment."
    )
    deepspeed: dict[str, Any] = Field(default_factory=dict, description="Merged over the generated DeepSpeed config.")
    multinode: MultiNodeSettings = Field(
        default_factory=MultiNodeSettings, description="nodes > 1: a Kubeflow Trainer TrainJob runs the ranks."
    )

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.min_lr is not None and self.min_lr > self.lr:
            raise ValueError("min_lr exceeds lr")
        if {"warmup_steps", "warmup_ratio"} <= self.model_fields_set and self.warmup_ratio is not None:
            raise ValueError("warmup_steps and warmup_ratio: give one")
        if self.recipe == "full" and self.lora.enabled:
            raise ValueError("recipe full trains every weight; lora.enabled asks for adapters (recipe: lora)")
        if self.recipe == "lora" and "enabled" in self.lora.model_fields_set and not self.lora.enabled:
            raise ValueError("recipe lora with lora.enabled false")
        if self.lora.enabled and self.weight_watermark.enabled:
            raise ValueError("lora and weight_watermark: the watermark's target weights are frozen under LoRA")
        mn = self.multinode
        if mn.nodes > 1 and mn.gpus_per_node:  # one rank per GPU
            if "world_size" not in self.model_fields_set:
                self.world_size = mn.nodes * mn.gpus_per_node
            elif self.world_size != mn.nodes * mn.gpus_per_node:
                raise ValueError(
                    f"world_size {self.world_size} is not multinode.nodes x gpus_per_node "
                    f"({mn.nodes} x {mn.gpus_per_node}): one rank per GPU"
                )
        if self.world_size % self.multinode.nodes:
            raise ValueError(
                f"world_size {self.world_size} is not a multiple of multinode.nodes "
                f"{self.multinode.nodes} (every node runs the same number of ranks)"
            )
        return self

    def for_model(self, from_scratch: bool, context: int | None) -> TrainConfig:
        """This config with its recipe's settings in every field it leaves unset (`recipe`
        resolved): what training runs with, and what its checkpoints commit to."""
        recipe = self.recipe or ("scratch" if from_scratch else "lora")
        data = self.model_dump()
        settings = dict(RECIPES[recipe])
        if recipe != "scratch" and context:
            settings["seq_len"] = min(settings["seq_len"], context)
        for key, value in settings.items():
            if key not in self.model_fields_set:
                data[key] = value
        if data["min_lr"] is None:
            data["min_lr"] = RECIPES[recipe]["min_lr"]
        if data["warmup_ratio"] is not None and "warmup_steps" not in self.model_fields_set:
            data["warmup_steps"] = math.ceil(data["warmup_ratio"] * self.steps)
        data["warmup_ratio"] = None  # resolved into warmup_steps
        if recipe == "lora":
            data["lora"]["enabled"] = True
        data["recipe"] = recipe
        return TrainConfig.model_validate(data)

    def deepspeed_config(self, hidden: int | None = None) -> dict[str, Any]:
        """The DeepSpeed config the engine gets: ours, then the passthrough on top. With the
        model's hidden size, ZeRO-3's buckets and limits are sized from it (zero3_sizes)."""
        cfg: dict[str, Any] = {
            "train_micro_batch_size_per_gpu": self.micro_batch,
            "gradient_accumulation_steps": self.grad_accum,
            "train_batch_size": self.micro_batch * self.grad_accum * self.world_size,
            "optimizer": {
                "type": "Adam",
                "params": {"lr": self.lr, "weight_decay": self.weight_decay, "torch_adam": True},
            },
            "zero_optimization": {"stage": 3, **(zero3_sizes(hidden) if hidden else {})},
            "gradient_clipping": 1.0,
            "steps_per_print": 10**9,
            "wall_clock_breakdown": False,
        }
        if self.precision == "bf16":
            cfg["bf16"] = {"enabled": True}
        elif self.precision == "fp16":
            cfg["fp16"] = {"enabled": True, "initial_scale_power": 12}
        return _merge(cfg, self.deepspeed)


# Floors of the sizes below: under them, per-call overheads (a gloo collective, an
# optimizer sub-group) cost more than the memory saves (a 2 M-parameter model's steps took
# twice as long at h² buckets).
_MIN_BUCKET, _MIN_GROUP = 1 << 22, 1 << 20


def zero3_sizes(hidden: int) -> dict[str, int]:
    """ZeRO-3's buckets and limits from the model's hidden size h, as Hugging Face's
    DeepSpeed integration sizes its `auto` values (reduce bucket h², prefetch 0.9 h²,
    parameters under 10 h stay gathered), the live-parameter and reuse limits at 10 h²,
    about one transformer block, and optimizer sub-groups of h² (the step's temporaries are
    one sub-group's); none below a floor of 4 M elements (1 M for a sub-group). DeepSpeed's
    own defaults (5e8 elements a bucket, 1e9 live parameters, one optimizer group for
    everything) exceed any model under a billion
    parameters, so each rank held several copies of its share at the first step."""
    block = max(10 * hidden * hidden, _MIN_BUCKET)
    return {
        "reduce_bucket_size": max(hidden * hidden, _MIN_BUCKET),
        "stage3_prefetch_bucket_size": max(int(0.9 * hidden * hidden), _MIN_BUCKET),
        "stage3_param_persistence_threshold": 10 * hidden,
        "stage3_max_live_parameters": block,
        "stage3_max_reuse_distance": block,
        "sub_group_size": max(hidden * hidden, _MIN_GROUP),
    }


def hidden_size(config) -> int | None:
    """A transformers config's hidden width (hidden_size, or GPT-2's n_embd)."""
    value = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None)
    return int(value) if value else None


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
