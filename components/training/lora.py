"""LoRA through peft under ZeRO-3: the base weights are frozen and partitioned like any
others, only the adapters train (DeepSpeed gets just them as the optimizer's parameters),
checkpoints hold them with everything else and are Merkle-hashed the same way, and the
export merges them into the base weights so evaluation, watermarking and serving see a
plain model of the base architecture."""

from __future__ import annotations

from kfp_llmops.components.common.errors import InputError

from .config import LoraSettings


def _peft_config(cfg: LoraSettings, model_type: str):
    from peft import LoraConfig

    return LoraConfig(
        r=cfg.r,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        task_type="CAUSAL_LM",
        target_modules=cfg.target_modules or None,
        fan_in_fan_out=model_type == "gpt2",
    )  # GPT-2's Conv1D stores weights transposed


def wrap(model, cfg: LoraSettings):
    """`model` with adapters on the target modules (peft's default per architecture when
    none are named); everything else frozen."""
    from peft import get_peft_model

    try:
        return get_peft_model(model, _peft_config(cfg, getattr(model.config, "model_type", "")))
    except ValueError as exc:  # no target modules known or found
        raise InputError(f"lora.target_modules: {exc}") from None


def trainable(model) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    params = list(model.parameters())
    count = lambda ps: sum(getattr(p, "ds_numel", p.numel()) for p in ps)  # noqa: E731 - ZeRO-3 keeps the size aside
    return count(p for p in params if p.requires_grad), count(params)


def merged_state(auto_cls, base_model: str, cfg: LoraSettings, state: dict) -> dict:
    """The consolidated adapter model's weights with the adapters merged in (W + BA·α/r),
    under the base architecture's own parameter names."""
    from transformers import AutoConfig

    model = wrap(auto_cls.from_config(AutoConfig.from_pretrained(base_model)), cfg)
    loaded = model.load_state_dict(state, strict=False)
    if loaded.unexpected_keys or [k for k in loaded.missing_keys if "lm_head" not in k]:
        raise RuntimeError(f"lora export: missing {loaded.missing_keys}, unexpected {loaded.unexpected_keys}")
    return model.merge_and_unload().state_dict()
