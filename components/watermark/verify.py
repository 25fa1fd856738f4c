"""verify_watermark: generate with the watermark on, detect it, calibrate the false
positive rate on unwatermarked text, measure robustness to token substitution and
deletion, and gate."""
from __future__ import annotations

import json
import os

import numpy as np

from kfp_llmops.components.common import integrity

from .config import WatermarkConfig
from .kgw import Watermark, logits_processor


def _generate(model, tokenizer, prompts: list[str], cfg: WatermarkConfig, processor) -> list[np.ndarray]:
    import torch
    from transformers import LogitsProcessorList

    from kfp_llmops.components.evaluation.generate import context_size, left_pad
    from kfp_llmops.components.training.data import format_example

    g = cfg.generation
    limit = max(1, context_size(model) - g.max_new_tokens)
    out = []
    for start in range(0, len(prompts), g.batch_size):
        batch = [tokenizer.encode(format_example(p, "")[0])[-limit:] for p in prompts[start:start + g.batch_size]]
        pad = tokenizer.pad_token_id
        input_ids, attention = left_pad(batch, pad)
        width = input_ids.shape[1]
        torch.manual_seed(g.seed + start)
        with torch.no_grad():
            result = model.generate(input_ids=input_ids, attention_mask=attention, do_sample=True,
                                    temperature=g.temperature, top_k=None, max_new_tokens=g.max_new_tokens,
                                    min_new_tokens=g.min_new_tokens, pad_token_id=pad,
                                    logits_processor=LogitsProcessorList([processor]) if processor else None)
        for row in result[:, width:].numpy():
            keep = row[row != pad] if pad != tokenizer.eos_token_id else row
            eos = np.flatnonzero(keep == tokenizer.eos_token_id)
            out.append(keep[: eos[0]] if len(eos) else keep)
    return out


def attack(tokens: np.ndarray, rate: float, kind: str, vocab: int, rng: np.random.Generator) -> np.ndarray:
    """Random token substitution or deletion of `rate` of the tokens."""
    hit = rng.random(len(tokens)) < rate
    if kind == "deletion":
        return tokens[~hit]
    out = tokens.copy()
    out[hit] = rng.integers(0, vocab, int(hit.sum()))
    return out


def _rate(detections, positive: bool) -> tuple[float, int]:
    scored = [d for d in detections if d.tokens_scored >= 1 and d.z == d.z]
    if not scored:
        return float("nan"), 0
    return sum(d.watermarked for d in scored) / len(scored), len(scored)


def verify(model_dir: str, eval_path: str, out_dir: str, cfg: WatermarkConfig, key: int,
           model_root: str | None = None) -> dict:
    from kfp_llmops.components.evaluation.evaluate import read_eval_set
    from kfp_llmops.components.evaluation.generate import load_model

    os.makedirs(out_dir, exist_ok=True)
    root = integrity.verify("model", model_dir, model_root)
    rows = read_eval_set(eval_path)
    model, tokenizer = load_model(model_dir)
    wm = Watermark(key, len(tokenizer), cfg.scheme, cfg.gamma, cfg.delta, cfg.z_threshold, cfg.min_tokens,
                   cfg.ignore_repeated)
    prompts = [r["prompt"] for r in rows]
    marked = _generate(model, tokenizer, prompts, cfg, logits_processor(wm))
    plain = _generate(model, tokenizer, prompts, cfg, None)
    references = [np.array(tokenizer.encode(r["response"])) for r in rows]
    d_marked = wm.detect_many(marked, with_mask=True)
    d_plain = wm.detect_many(plain)
    d_refs = wm.detect_many(references)
    tpr, n_pos = _rate(d_marked, True)
    fpr, n_neg = _rate(d_plain + d_refs, False)
    rng = np.random.default_rng(cfg.attack_seed)
    robustness = {}
    for kind in ("substitution", "deletion"):
        for rate in cfg.attack_rates:
            attacked = [attack(t, rate, kind, len(tokenizer), rng) for t in marked]
            robustness[f"tpr_{kind}_{int(round(rate * 100))}"] = _rate(wm.detect_many(attacked), True)[0]
    metrics = {"tpr": tpr, "fpr": fpr, "positives_scored": n_pos, "negatives_scored": n_neg,
               "references_scored": sum(d.z == d.z for d in d_refs), "mean_z_watermarked": _mean(d_marked),
               "mean_z_unwatermarked": _mean(d_plain + d_refs), **robustness}
    g = cfg.gate
    checks = [("tpr", tpr, f">= {g.min_tpr}", tpr >= g.min_tpr),
              ("fpr", fpr, f"<= {g.max_fpr}", fpr <= g.max_fpr),
              ("tpr_substitution_10", robustness.get("tpr_substitution_10", float("nan")),
               f">= {g.min_tpr_substitution_10}", robustness.get("tpr_substitution_10", 0) >= g.min_tpr_substitution_10)]
    if cfg.weights.enabled:
        from .weights import extract_from_model_dir
        found = extract_from_model_dir(model_dir, key, cfg.weights)
        metrics.update({"bit_accuracy": found.bit_accuracy, "bit_p_value": found.p_value, "bits": found.bits})
        checks += [("bit_accuracy", found.bit_accuracy, f">= {g.min_bit_accuracy}", found.bit_accuracy >= g.min_bit_accuracy),
                   ("bit_p_value", found.p_value, f"<= {g.max_bit_p_value:g}", found.p_value <= g.max_bit_p_value)]
    checks = [{"metric": m, "value": v, "bound": b, "verdict": "pass" if ok and v == v else "fail"}
              for m, v, b, ok in checks]
    verified = all(c["verdict"] == "pass" for c in checks)
    with open(os.path.join(out_dir, "watermarked.jsonl"), "w", encoding="utf-8") as handle:
        for row, toks, d in zip(rows, marked, d_marked):
            handle.write(json.dumps({"id": row["id"], "prompt": row["prompt"], "response": tokenizer.decode(toks),
                                     **d.to_json()}) + "\n")
    result = {"verified": verified, "metrics": metrics, "checks": checks, "model_root": root,
              "scheme": cfg.scheme, "gamma": cfg.gamma, "delta": cfg.delta, "z_threshold": cfg.z_threshold,
              "z_watermarked": [d.z for d in d_marked], "z_unwatermarked": [d.z for d in d_plain + d_refs],
              "highlights": [_highlight(tokenizer, t, d) for t, d in list(zip(marked, d_marked))[:3]]}
    with open(os.path.join(out_dir, "metrics.json"), "w", encoding="utf-8") as handle:
        json.dump({k: result[k] for k in ("verified", "metrics", "checks", "model_root", "scheme", "gamma", "delta")},
                  handle, indent=2)
    return result


def _mean(detections) -> float:
    zs = [d.z for d in detections if d.z == d.z]
    return sum(zs) / len(zs) if zs else float("nan")


def _highlight(tokenizer, tokens: np.ndarray, detection) -> list[tuple[str, bool | None]]:
    """(token text, green?) per token; the first `width` tokens have no context (None)."""
    width = len(tokens) - len(detection.green_mask)
    return [(tokenizer.decode([int(t)]), None if i < width else bool(detection.green_mask[i - width]))
            for i, t in enumerate(tokens)]
