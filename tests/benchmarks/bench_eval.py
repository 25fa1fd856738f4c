"""Evaluation benchmark: samples/s of generation, BERTScore and each toxicity detector at
a few batch sizes on CPU, and the stage's overhead against calling the libraries
directly on the same data (target <= 10 %)."""

from __future__ import annotations

import json
import os
import time

from kfp_llmops.components.evaluation.config import EvalConfig
from kfp_llmops.components.training.base_model import build_base_model
from kfp_llmops.pipelines.demo.demo_data import make_demo_dataset

BATCHES = (1, 8, 32)


def _rate(n: int, fn) -> float:
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


def main(work: str = "build/bench/eval", samples: int = 200) -> dict:
    import bert_score
    import torch
    from detoxify import Detoxify
    from profanity_check import predict_prob

    from kfp_llmops.components.common.generation import load_model
    from kfp_llmops.components.common.similarity import resolve_model
    from kfp_llmops.components.evaluation import run_to_dir
    from kfp_llmops.components.evaluation.generate import generate
    from kfp_llmops.components.evaluation.toxicity import resolve_checkpoint

    os.makedirs(work, exist_ok=True)
    data = make_demo_dataset(os.path.join(work, "data"), rows=2000, eval_rows=samples)
    clean = os.path.join(work, "clean.jsonl")
    with open(data["train"], "rb") as src, open(clean, "wb") as dst:  # only well-formed rows
        for line in src:
            try:
                row = json.loads(line)
                if (
                    isinstance(row, dict)
                    and isinstance(row.get("prompt"), str)
                    and isinstance(row.get("response"), str)
                ):
                    dst.write(line)
            except ValueError:
                pass
    model_dir = os.path.join(work, "model")
    if not os.path.isdir(model_dir):
        build_base_model(clean, model_dir, size="demo")
    rows = [json.loads(line) for line in open(data["eval"])]
    refs = [r["response"] for r in rows]
    cfg = EvalConfig()
    model, tokenizer = load_model(model_dir)
    minilm = resolve_model("minilm")
    ckpt, hf, _ = resolve_checkpoint(cfg.toxicity)
    detox = Detoxify(checkpoint=ckpt, huggingface_config_path=hf)
    n = len(rows)
    result: dict = {"samples": n, "generation": {}, "bertscore": {}, "detoxify": {}, "lexical": {}}
    for b in BATCHES:
        gcfg = EvalConfig(generation={"batch_size": b})
        result["generation"][b] = _rate(n, lambda gcfg=gcfg: generate(model, tokenizer, rows, gcfg))
        result["bertscore"][b] = _rate(
            n, lambda b=b: bert_score.score(refs, refs, model_type=minilm, num_layers=6, batch_size=b, lang="en")
        )
        result["detoxify"][b] = _rate(n, lambda b=b: [detox.predict(refs[i : i + b]) for i in range(0, n, b)])
    result["lexical"]["all"] = _rate(n, lambda: predict_prob(refs))

    # Overhead: the whole stage vs the same library calls made directly (models loaded,
    # same data and settings), best of three each.
    def direct():
        model, tokenizer = load_model(model_dir)
        detox = Detoxify(checkpoint=ckpt, huggingface_config_path=hf)
        out = generate(model, tokenizer, rows, cfg)
        cands = [g.response or "." for g in out]
        bert_score.score(cands, refs, model_type=minilm, num_layers=6, batch_size=cfg.bertscore.batch_size, lang="en")
        for i in range(0, n, cfg.toxicity.batch_size):
            detox.predict(cands[i : i + cfg.toxicity.batch_size])
        predict_prob(cands)
        from kfp_llmops.components.common.generation import context_size
        from kfp_llmops.components.common.perplexity import perplexity

        perplexity(model, tokenizer, rows, cfg.perplexity_batch_size, context_size(model))

    torch.set_num_threads(torch.get_num_threads())
    direct_s, stage_s = [], []
    for i in range(3):
        start = time.perf_counter()
        direct()
        direct_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        run_to_dir(model_dir, data["eval"], os.path.join(work, f"out{i}"), show_progress=False)
        stage_s.append(time.perf_counter() - start)
    result["direct_s"], result["stage_s"] = min(direct_s), min(stage_s)
    result["overhead"] = result["stage_s"] / result["direct_s"] - 1
    return result


def report(r: dict) -> str:
    lines = [
        f"## evaluate_llm ({r['samples']} samples, CPU; samples/s by batch size)",
        "  batch   generation   BERTScore   Detoxify",
    ]
    for b in BATCHES:
        lines.append(f"  {b:>5} {r['generation'][b]:12.1f} {r['bertscore'][b]:11.1f} {r['detoxify'][b]:10.1f}")
    lines.append(f"  alt-profanity-check (one call): {r['lexical']['all']:,.0f} samples/s")
    lines.append(
        f"stage end to end {r['stage_s']:.2f} s vs the same library calls direct {r['direct_s']:.2f} s: "
        f"overhead {r['overhead']:+.1%} (target <= 10 %; includes the model's Merkle verification, "
        "reports and histograms)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    res = main()
    print(report(res))
