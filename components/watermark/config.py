"""The watermark stage's one config model. The key is not here: it comes from a file, an
environment variable or a mounted Secret (`keys.py`), never from pipeline YAML."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kfp_llmops.components.common.config import StageConfig

from .weights import WeightWatermarkConfig


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class WatermarkGeneration(_Section):
    max_new_tokens: int = Field(100, ge=1)
    min_new_tokens: int = Field(100, ge=0, description="Long enough texts for the z-test.")
    temperature: float = Field(1.0, gt=0)
    batch_size: int = Field(16, ge=1)
    seed: int = 0


class WatermarkGate(_Section):
    min_tpr: float = Field(0.95, ge=0, le=1)
    max_fpr: float = Field(0.01, ge=0, le=1)
    min_tpr_substitution_10: float = Field(0.80, ge=0, le=1)
    min_bit_accuracy: float = Field(0.925, ge=0, le=1, description="Weight watermark, when enabled.")
    max_bit_p_value: float = Field(1e-9, ge=0, le=1, description="Weight watermark, when enabled.")


class WatermarkConfig(StageConfig):
    scheme: Literal["lefthash", "selfhash"] = "lefthash"
    gamma: float = Field(0.25, gt=0, lt=1)
    delta: float = Field(2.0, ge=0)
    z_threshold: float = Field(4.0, gt=0)
    min_tokens: int = Field(16, ge=1)
    ignore_repeated: bool = True
    generation: WatermarkGeneration = Field(default_factory=WatermarkGeneration)
    attack_rates: list[float] = Field(default_factory=lambda: [0.1, 0.3])
    attack_seed: int = 0
    gate: WatermarkGate = Field(default_factory=WatermarkGate)
    weights: WeightWatermarkConfig = Field(default_factory=WeightWatermarkConfig,
                                           description="Must match the training stage's weight_watermark.")
