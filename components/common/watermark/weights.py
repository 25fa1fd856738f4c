"""Weight watermark (Uchida et al. 2017): a secret projection X (bits x M) of a target
layer's weights, reduced to a vector w of length M; the embedded bits are sign(X·w).
Training adds lambda * BCE(X·w, bits) to the loss; extraction reads the signs back and
reports bit accuracy with a one-sided binomial p-value (chance = 1/2 per bit)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

_PROJECTION_SALT = 0x5EED_0001
_BITS_SALT = 0x5EED_0002


class WeightWatermarkConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    enabled: bool = False
    target: str = Field("transformer.h.0.mlp.c_proj.weight", description="Parameter name of the target layer.")
    bits: int = Field(64, ge=8, le=4096)
    strength: float = Field(0.5, ge=0, description="lambda, the regularizer's weight in the loss.")


def _generator(key: int, salt: int):
    import torch

    gen = torch.Generator(device="cpu")
    gen.manual_seed((key ^ salt) & ((1 << 63) - 1))
    return gen


def reduce(weight):
    """The layer's weights as one vector: the mean over the last dimension (Uchida)."""
    return weight.float().reshape(weight.shape[0], -1).mean(dim=1)


def secret(key: int, bits: int, length: int):
    """(projection X, message bits) derived from the key."""
    import torch

    x = torch.randn(bits, length, generator=_generator(key, _PROJECTION_SALT))
    b = torch.randint(0, 2, (bits,), generator=_generator(key, _BITS_SALT)).float()
    return x, b


def regularizer(weight, key: int, bits: int):
    import torch

    w = reduce(weight)
    x, b = secret(key, bits, w.numel())
    return torch.nn.functional.binary_cross_entropy_with_logits(x @ w, b)


def binomial_sf(k: int, n: int) -> float:
    """P(K >= k) for K ~ Binomial(n, 1/2), exact."""
    return sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n


@dataclass
class Extraction:
    bits: int
    matching: int
    bit_accuracy: float
    p_value: float


def extract(weight, key: int, bits: int) -> Extraction:
    import torch

    with torch.no_grad():
        w = reduce(weight)
        x, b = secret(key, bits, w.numel())
        found = (x @ w > 0).float()
    k = int((found == b).sum())
    return Extraction(bits, k, k / bits, binomial_sf(k, bits))


def extract_from_model_dir(model_dir: str, key: int, cfg: WeightWatermarkConfig) -> Extraction:
    import os

    from safetensors.torch import load_file

    from kfp_llmops.components.common.errors import InputError

    state = load_file(os.path.join(model_dir, "model.safetensors"))
    if cfg.target not in state:
        raise InputError(
            f"weight_watermark.target: {cfg.target!r} is not a parameter of the model (e.g. {sorted(state)[:3]})"
        )
    return extract(state[cfg.target], key, cfg.bits)
