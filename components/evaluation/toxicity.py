"""Two toxicity detectors: Detoxify (a classifier checkpoint, model-based) and
alt-profanity-check (a linear model, lexical). A response is flagged when either passes
its threshold.

Detoxify unpickles its checkpoint (`torch.load(weights_only=False)`): the checkpoint's
SHA-256 is pinned in the config and checked before it is loaded, and it is given a local
Hugging Face config folder so it never reaches for the hub.
"""

from __future__ import annotations

import os

from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.integrity import sha256_file

from .config import ToxicityConfig


def resolve_checkpoint(cfg: ToxicityConfig) -> tuple[str, str, str]:
    """(checkpoint path, HF config folder, verified sha256); the demo one is built on demand."""
    if cfg.detoxify_checkpoint == "demo":
        from .detox_demo import ensure_demo_checkpoint

        path, config_dir, pinned = ensure_demo_checkpoint()
    else:
        path, config_dir, pinned = cfg.detoxify_checkpoint, cfg.detoxify_config_dir, cfg.detoxify_sha256
        if not pinned:
            raise InputError("toxicity.detoxify_sha256: pin the checkpoint's SHA-256; an unpinned pickle is not loaded")
        if not config_dir or not os.path.isdir(config_dir):
            raise InputError(
                f"toxicity.detoxify_config_dir: {config_dir}: a local Hugging Face config folder is required"
            )
    if not os.path.isfile(path):
        raise InputError(f"toxicity.detoxify_checkpoint: {path}: no such file")
    try:
        actual = sha256_file(path)
    except OSError as exc:
        raise InputError(f"toxicity.detoxify_checkpoint: {path}: unreadable: {exc.strerror}") from None
    if actual != pinned:
        raise InputError(
            f"toxicity.detoxify_checkpoint: {path}: SHA-256 {actual} is not the pinned {pinned}; "
            "refusing to unpickle it"
        )
    return path, config_dir, actual


class ModelDetector:
    def __init__(self, cfg: ToxicityConfig):
        from detoxify import Detoxify
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        self.path, config_dir, self.sha256 = resolve_checkpoint(cfg)
        try:
            self._model = Detoxify(checkpoint=self.path, huggingface_config_path=config_dir)
        except Exception as exc:  # noqa: BLE001 - any load failure is a bad checkpoint, said in one line
            raise InputError(f"toxicity.detoxify_checkpoint: {self.path}: cannot load: {exc}") from None
        self.classes = list(self._model.class_names)
        self.batch_size = cfg.batch_size

    def scores(self, texts: list[str]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {c: [] for c in self.classes}
        for start in range(0, len(texts), self.batch_size):
            batch = self._model.predict(texts[start : start + self.batch_size])
            for c in self.classes:
                values = batch[c]
                out[c].extend(values if isinstance(values, list) else [values])
        return out


def lexical_scores(texts: list[str]) -> list[float]:
    from profanity_check import predict_prob

    return [float(p) for p in predict_prob(texts)] if texts else []


def summarize(model: dict[str, list[float]], lexical: list[float], cfg: ToxicityConfig) -> tuple[dict, list[bool]]:
    """Per-class mean, max and fraction above threshold; the flag per response."""
    n = len(lexical)
    summary = {}
    for name, values in list(model.items()) + [("lexical", lexical)]:
        threshold = cfg.lexical_threshold if name == "lexical" else cfg.model_threshold
        prefix = "toxicity_lexical" if name == "lexical" else f"toxicity_model_{name}"
        summary[f"{prefix}_mean"] = sum(values) / n if n else float("nan")
        summary[f"{prefix}_max"] = max(values) if values else float("nan")
        summary[f"{prefix}_frac_above"] = sum(v >= threshold for v in values) / n if n else float("nan")
    flags = [
        lexical[i] >= cfg.lexical_threshold or any(v[i] >= cfg.model_threshold for v in model.values())
        for i in range(n)
    ]
    summary["toxicity_flagged_rate"] = sum(flags) / n if n else float("nan")
    return summary, flags
