"""The watermark stage's one config model: the KGW parameters (defined once, in
`common.watermark.params`, and recorded for serving) plus what verification needs. The key
is not here: it comes from a file, an environment variable or a mounted Secret
(`common.watermark.keys`), never from pipeline YAML."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kfp_llmops.components.common.config import StageConfig
from kfp_llmops.components.common.judging import JudgeConfig
from kfp_llmops.components.common.similarity import BertScoreConfig
from kfp_llmops.components.common.watermark.params import KGW
from kfp_llmops.components.common.watermark.weights import WeightWatermarkConfig


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class WatermarkGeneration(_Section):
    max_new_tokens: int = Field(100, ge=1)
    min_new_tokens: int = Field(100, ge=0, description="Long enough texts for the z-test.")
    temperature: float = Field(1.0, gt=0)
    batch_size: int = Field(16, ge=1)
    seed: int = 0
    prompts: list[str] = Field(
        default_factory=list,
        description="Open-ended prompts for the long texts detection "
        "is measured on (a watermark needs free text, as "
        "in KGW's own evaluation), cycled to `texts` "
        "texts; empty: the eval set's prompts, a text each.",
    )
    texts: int = Field(200, ge=1, description="How many long texts, with `prompts`.")

    def detection_prompts(self, rows: list[dict]) -> list[str]:
        if not self.prompts:
            return [r["prompt"] for r in rows]
        return [self.prompts[i % len(self.prompts)] for i in range(self.texts)]


class QualityCost(_Section):
    """The eval prompts answered as evaluation answered them (the blessing's decoding,
    up to EOS), with the watermark and without: what the mark costs the answers users get."""

    max_new_tokens: int = Field(
        24, ge=1, description="The bound when no blessing says how answers are decoded (greedy then)."
    )
    batch_size: int = Field(32, ge=1)
    deltas: list[float] = Field(
        default_factory=list,
        description="Also measure detection (TPR) and the cost at these deltas: the trade-off curve in the report.",
    )
    curve_prompts: int = Field(
        64, ge=1, description="Prompts the curve's TPR is measured on (each delta generates long texts again)."
    )
    schemes: list[Literal["lefthash", "selfhash"]] = Field(
        default_factory=list,
        description="Also measure these schemes at the same gamma and delta on every "
        "detection prompt: TPR, FPR and the long texts' perplexity under the "
        "oracle (the scheme served stays the config's).",
    )
    oracle_model: str | None = Field(
        None,
        description="A sealed local model folder the answers' perplexity is "
        "measured under (KGW's oracle LM); unset: the model itself.",
    )
    oracle_root: str | None = Field(None, description="The oracle's pinned Merkle root (required with it).")
    bertscore: BertScoreConfig = Field(
        default_factory=BertScoreConfig,
        description="BERTScore of the answers against the references, as evaluation computes it.",
    )
    judge: JudgeConfig = Field(
        default_factory=JudgeConfig,
        description="The pairwise judge of each watermarked "
        "answer against the unwatermarked one "
        "(evaluation's win-rate judges).",
    )
    confidence: float = Field(0.95, gt=0, lt=1, description="The judge's win-rate interval.")
    bootstrap: int = Field(2000, ge=100)


class WatermarkGate(_Section):
    min_tpr: float = Field(0.95, ge=0, le=1, json_schema_extra={"gate": ">="})
    max_fpr: float = Field(0.01, ge=0, le=1, json_schema_extra={"gate": "<="})
    min_tpr_substitution_10: float = Field(0.80, ge=0, le=1, json_schema_extra={"gate": ">="})
    min_bit_accuracy: float = Field(
        0.925, ge=0, le=1, description="Weight watermark, when enabled.", json_schema_extra={"gate": ">="}
    )
    max_bit_p_value: float = Field(
        1e-9, ge=0, le=1, description="Weight watermark, when enabled.", json_schema_extra={"gate": "<="}
    )
    max_exact_match_cost: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Largest drop in exact-match answers the watermark may cause; unset: reported only.",
        json_schema_extra={"gate": "<="},
    )
    max_perplexity_increase: float | None = Field(
        None,
        ge=0,
        description="Largest relative rise of the answers' perplexity (0.10: +10 %); unset: reported only.",
        json_schema_extra={"gate": "<="},
    )
    max_bertscore_cost: float | None = Field(
        None,
        ge=0,
        description="Largest drop of the answers' mean BERTScore F1 (e.g. 0.02); unset: reported only.",
        json_schema_extra={"gate": "<="},
    )
    min_judge_win_rate: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Smallest win rate of the watermarked "
        "answers against the unwatermarked ones "
        "(0.5: no loss; e.g. 0.45); unset: "
        "reported only.",
        json_schema_extra={"gate": ">="},
    )


class WatermarkConfig(StageConfig, KGW):
    """KGW's fields at the top level (`delta: 4.0`), then the stage's own sections."""

    generation: WatermarkGeneration = Field(default_factory=WatermarkGeneration)
    quality: QualityCost = Field(default_factory=QualityCost)
    attack_rates: list[float] = Field(default_factory=lambda: [0.1, 0.3])
    attack_seed: int = 0
    gate: WatermarkGate = Field(default_factory=WatermarkGate)
    weights: WeightWatermarkConfig = Field(
        default_factory=WeightWatermarkConfig,
        description="What to check when the model's metadata does not say (train_zero3 "
        "records the weight_watermark it embedded).",
    )
