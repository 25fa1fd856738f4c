"""The KGW parameters, defined once: the watermark stage verifies with them and records
them in its output's metadata; the deploy stage writes exactly those into the served
model's settings, where the Triton model and the canary's smoke detector read them."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kfp_llmops.components.common.errors import InputError


class KGW(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    scheme: Literal["lefthash", "selfhash"] = "lefthash"
    gamma: float = Field(0.25, gt=0, lt=1, description="Share of the vocabulary on each green list.")
    delta: float = Field(2.0, ge=0, description="Logit bias added to green tokens while generating.")
    z_threshold: float = Field(4.0, gt=0, description="z-score above which a text counts as watermarked.")
    min_tokens: int = Field(16, ge=1, description="Texts with fewer scored tokens are not judged.")
    ignore_repeated: bool = Field(True, description="Score each (context, token) pair once per text.")

    def watermark(self, key: int, vocab_size: int):
        """The detector / logits-bias for this key and vocabulary."""
        from .kgw import Watermark

        return Watermark(
            key,
            vocab_size,
            self.scheme,
            self.gamma,
            self.delta,
            self.z_threshold,
            self.min_tokens,
            self.ignore_repeated,
        )

    @classmethod
    def of(cls, config: BaseModel) -> KGW:
        """The KGW fields of a config that embeds them (the watermark stage's)."""
        return cls(**{name: getattr(config, name) for name in cls.model_fields})

    @classmethod
    def from_record(cls, source: dict | str, origin: str) -> KGW:
        """The parameters verify_watermark recorded: its output's metadata (a dict) or its
        metrics.json (a path), both under `kgw`."""
        if isinstance(source, str):
            try:
                with open(source, encoding="utf-8") as handle:
                    source = json.load(handle)
            except (OSError, ValueError) as exc:
                raise InputError(f"{source}: unreadable watermark record: {exc}") from None
        if not isinstance(source, dict) or "kgw" not in source:
            raise InputError(f"{origin}: no 'kgw' parameters recorded (was it written by verify_watermark?)")
        return cls.parse(source["kgw"], origin)

    @classmethod
    def parse(cls, data, origin: str) -> KGW:
        """From recorded metadata; InputError naming `origin` and the field otherwise."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise InputError(
                f"{origin}: watermark parameter {'.'.join(map(str, err['loc'])) or '-'}: {err['msg']}"
            ) from None
