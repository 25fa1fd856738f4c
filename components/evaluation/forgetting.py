"""Forgetting: fine-tuning on a narrow set can cost a pretrained model what it knew. The
candidate and the model its training started from each read the same held-out general
prose; the gate bounds how much the candidate's perplexity rose. A base built from random
weights knew nothing, so there is nothing to forget and the check is skipped, saying so."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from kfp_llmops.components.common import integrity
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.gates import Check
from kfp_llmops.components.common.generation import from_scratch

from .config import ForgettingConfig

KIND = "forgetting"


@dataclass
class Base:
    """The model training started from: its folder (None when there is none to compare
    with, `why_not` saying why) and its root."""

    folder: str | None
    root: str | None
    why_not: str = ""


def find_base(cfg: ForgettingConfig, given: str | None, stated_root: str | None) -> Base:
    """`forgetting.base_model`, else `given` (the pipeline's base model, `--base-model`),
    verified against the pinned root (the config's, else the candidate's recorded one)."""
    folder = cfg.base_model or given
    if not cfg.enabled:
        return Base(None, None, "forgetting.enabled is false")
    if not folder:
        return Base(
            None,
            None,
            "no base model given (the pipeline passes the one training started from; `llmops eval --base-model DIR`)",
        )
    root = integrity.verify("model", folder, cfg.base_model_root or stated_root)
    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as handle:
            scratch = from_scratch(json.load(handle))
    except (OSError, ValueError) as exc:
        raise InputError(f"{os.path.join(folder, 'config.json')}: unreadable: {exc}") from None
    if scratch:
        return Base(None, root, "the base model was built from random weights: it knew nothing to forget")
    return Base(folder, root)


def passages(cfg: ForgettingConfig) -> list[str]:
    if not cfg.texts:
        from kfp_llmops.components.common.prose import held_out_passages

        return held_out_passages(cfg.passages)
    try:
        with open(cfg.texts, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{cfg.texts}: forgetting.texts: unreadable: {exc}") from None
    out = [" ".join(p.split()) for p in text.split("\n\n") if p.strip()][: cfg.passages]
    if not out:
        raise InputError(f"{cfg.texts}: forgetting.texts: no passages (separate them with blank lines)")
    return out


def measure(model, tokenizer, base: Base, cfg: ForgettingConfig, candidate_root: str) -> dict:
    """The candidate's and the base's perplexity on the passages, and the relative rise."""
    from kfp_llmops.components.common.generation import context_size, load_model
    from kfp_llmops.components.common.perplexity import text_perplexity

    texts = passages(cfg)
    mine = text_perplexity(model, tokenizer, texts, cfg.batch_size, context_size(model))
    if base.root == candidate_root:
        theirs = mine
    else:
        base_model, base_tokenizer = load_model(base.folder)
        theirs = text_perplexity(base_model, base_tokenizer, texts, cfg.batch_size, context_size(base_model))
    return {
        "general_perplexity": mine,
        "general_perplexity_base": theirs,
        "forgetting": mine / theirs - 1,
        "forgetting_passages": len(texts),
    }


def checks(found: dict | None, max_forgetting: float | None, base: Base) -> list[Check]:
    if max_forgetting is None:
        return []
    bound = f"<= {max_forgetting:g}"
    if found is None:
        return [Check("forgetting", None, bound, "skipped", base.why_not, KIND)]
    value = found["forgetting"]
    return [
        Check(
            "forgetting",
            value,
            bound,
            "pass" if value <= max_forgetting else "fail",
            f"held-out prose perplexity {found['general_perplexity']:.2f} against the base model's "
            f"{found['general_perplexity_base']:.2f}",
            KIND,
        )
    ]
