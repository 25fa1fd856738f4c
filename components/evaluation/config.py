"""The evaluation stage's one config model: generation, metrics, and the blessing gate's
value and change thresholds (the only place the gate reads them from)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kfp_llmops.components.common.config import StageConfig
from kfp_llmops.components.common.decoding import Decoding
from kfp_llmops.components.common.judging import JudgeConfig
from kfp_llmops.components.common.similarity import BertScoreConfig


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class GenerationConfig(Decoding):
    """The decoding the model is judged under (recorded with the blessing: the server's
    default), and how the answers are batched and seeded."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    batch_size: int = Field(16, ge=1)
    seed: int = 0

    def decoding(self) -> Decoding:
        return Decoding.model_validate(self.model_dump(include=set(Decoding.model_fields)))


class ToxicityConfig(_Section):
    detoxify_checkpoint: str = Field(
        "demo",
        description="'demo' (built from MiniLM by kfp-llmops) or a "
        "checkpoint path, e.g. the official ones in the image.",
    )
    detoxify_config_dir: str | None = Field(None, description="Local Hugging Face config + tokenizer folder.")
    detoxify_sha256: str | None = Field(None, description="Pinned SHA-256 of the checkpoint (required for a path).")
    model_threshold: float = Field(0.65, ge=0, le=1)
    lexical_threshold: float = Field(0.8, ge=0, le=1)
    batch_size: int = Field(32, ge=1)


class Bound(_Section):
    lower: float | None = None
    upper: float | None = None

    @model_validator(mode="after")
    def _some(self) -> Bound:
        if self.lower is None and self.upper is None:
            raise ValueError("a value threshold needs lower and/or upper")
        return self


class Change(_Section):
    direction: Literal["higher_is_better", "lower_is_better"]
    absolute: float | None = Field(None, description="Allowed change (candidate - baseline).")
    relative: float | None = Field(None, description="Allowed (candidate - baseline) / baseline.")

    @model_validator(mode="after")
    def _some(self) -> Change:
        if self.absolute is None and self.relative is None:
            raise ValueError("a change threshold needs absolute and/or relative")
        return self


def _default_value() -> dict[str, Bound]:
    """Similarity alone blesses fluent nonsense, so the defaults also check the answers
    themselves (see answers.py). exact_match suits tasks whose references are the answer
    (Q&A, extraction); for open-ended generation set `gate.value` without it."""
    return {
        "bertscore_f1": Bound(lower=0.3),
        "exact_match": Bound(lower=0.5),
        "repetition_rate": Bound(upper=0.2),
        "distinct_2_ratio": Bound(lower=0.5),
        "empty_rate": Bound(upper=0.05),
        "unfinished_rate": Bound(upper=0.2),
        "toxicity_flagged_rate": Bound(upper=0.01),
        "perplexity": Bound(upper=100.0),
    }


def _default_change() -> dict[str, Change]:
    return {
        "bertscore_f1": Change(direction="higher_is_better", absolute=-0.02),
        "exact_match": Change(direction="higher_is_better", absolute=-0.02),
        "perplexity": Change(direction="lower_is_better", relative=0.10),
        "toxicity_flagged_rate": Change(direction="lower_is_better", absolute=0.01),
    }


class WinRateConfig(_Section):
    """The candidate against the model in production, on the same prompts."""

    enabled: bool = True
    baseline_model: str | None = Field(
        None,
        description="The production model's folder or URI; default: the promoted release's, found through its record.",
    )
    baseline_model_root: str | None = Field(
        None, description="Its pinned Merkle root; default: the promoted release's model root."
    )
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    confidence: float = Field(0.95, gt=0, lt=1)
    bootstrap: int = Field(2000, ge=100, description="Bootstrap resamples over prompts for the interval.")


class ForgettingConfig(_Section):
    """Did fine-tuning make the model forget? The perplexity of held-out general prose
    under the candidate and under the model its training started from."""

    enabled: bool = True
    texts: str | None = Field(
        None,
        description="A UTF-8 text file of general text, passages separated by blank "
        "lines; default: passages of the Python language reference that "
        "ships with CPython (its long sentences, which no demo data "
        "trains on).",
    )
    passages: int = Field(32, ge=1, description="Passages measured (about 120 words each by default).")
    base_model: str | None = Field(
        None,
        description="The base model's folder; default: the one the pipeline "
        "trained from (or `llmops eval --base-model`).",
    )
    base_model_root: str | None = Field(
        None,
        description="Its pinned Merkle root; default: the candidate's "
        "recorded base_model_root, else the folder's manifest.",
    )
    batch_size: int = Field(8, ge=1)


class GateConfig(_Section):
    value: dict[str, Bound] = Field(default_factory=_default_value)
    change: dict[str, Change] = Field(default_factory=_default_change)
    min_win_rate: float | None = Field(
        0.45,
        ge=0,
        le=1,
        description="Win rate against production (ties count half); null: reported only (was win_rate.min_win_rate).",
        json_schema_extra={"gate": ">="},
    )
    min_win_rate_lower_bound: float | None = Field(
        0.35,
        ge=0,
        le=1,
        description="The win rate interval's lower end (was win_rate.min_lower_bound).",
        json_schema_extra={"gate": ">="},
    )
    max_forgetting: float | None = Field(
        0.10,
        ge=0,
        description="Candidate perplexity / base perplexity - 1 on held-out prose (0.10: +10 %); null: reported "
        "only (was forgetting.max_increase).",
        json_schema_extra={"gate": "<="},
    )


class EvalConfig(StageConfig):
    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    bertscore: BertScoreConfig = Field(default_factory=BertScoreConfig)
    toxicity: ToxicityConfig = Field(default_factory=ToxicityConfig)
    max_prompt_tokens: int | None = Field(None, ge=1, description="Default: context - max_new_tokens.")
    perplexity_batch_size: int = Field(16, ge=1)
    gate: GateConfig = Field(default_factory=GateConfig)
    win_rate: WinRateConfig = Field(default_factory=WinRateConfig)
    forgetting: ForgettingConfig = Field(default_factory=ForgettingConfig)

    MOVED: ClassVar[dict[str, str]] = {
        "win_rate.min_win_rate": "gate.min_win_rate",
        "win_rate.min_lower_bound": "gate.min_win_rate_lower_bound",
        "forgetting.max_increase": "gate.max_forgetting",
    }
