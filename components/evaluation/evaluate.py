"""evaluate_llm: generate responses, score them (exact match, BERTScore, two toxicity
detectors), compute reference perplexity, judge them against the model in production
(win rate), and bless or refuse the model."""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass

from kfp_llmops.components.common import answers, atomic, integrity
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.jsonl import read_eval_set
from kfp_llmops.components.common.progress import progress

from . import forgetting
from .config import EvalConfig
from .gate import evaluate_gate


def read_baseline(path: str | None) -> dict | None:
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise InputError(f"{path}: cannot read baseline metrics: {exc.strerror}") from None
    except ValueError:
        raise InputError(f"{path}: baseline metrics are not JSON") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: baseline metrics must be a JSON object of metric -> value")
    return data.get("metrics", data)


def evaluate(
    model_dir: str,
    eval_path: str,
    out_dir: str,
    cfg: EvalConfig,
    baseline_path: str | None = None,
    model_root: str | None = None,
    show_progress: bool = True,
    baseline_metrics: dict | None = None,
    baseline_note: str | None = None,
    production: Production | None = None,
    base: forgetting.Base | None = None,
    compared_with: dict | None = None,
) -> dict:
    """Writes responses.jsonl, samples.jsonl, metrics.json, blessing.json; returns the result.
    `compared_with`: which production release the blessing was judged against (the pin;
    `baseline.compared_with`), recorded so deploy promotes only over that release.

    The baseline is `baseline_path` (a metrics JSON) or `baseline_metrics`, described by
    `baseline_note` (e.g. which promoted release it came from). `production` is the model
    in production the candidate is judged against (the win rate); `base` the model its
    training started from (forgetting)."""
    from transformers.utils import logging as hf_logging

    from kfp_llmops.components.common import judging
    from kfp_llmops.components.common.generation import context_size, load_model
    from kfp_llmops.components.common.perplexity import perplexity
    from kfp_llmops.components.common.similarity import bertscore

    from . import winrate
    from .generate import generate
    from .toxicity import ModelDetector, lexical_scores, summarize

    hf_logging.disable_progress_bar()
    os.makedirs(out_dir, exist_ok=True)
    root = integrity.verify("model", model_dir, model_root)
    rows = read_eval_set(eval_path)
    baseline = read_baseline(baseline_path) if baseline_path else baseline_metrics
    detector = ModelDetector(cfg.toxicity)  # pin checked before anything heavy runs
    timings: dict[str, float] = {}
    started = time.perf_counter()
    try:
        model, tokenizer = load_model(model_dir)
    except Exception as exc:  # noqa: BLE001 - a model that will not load is bad input
        raise InputError(f"{model_dir}: cannot load the model: {exc}") from None
    timings["load_s"] = time.perf_counter() - started

    t0 = time.perf_counter()
    bar = progress(len(rows), "generate", unit="sample", enabled=show_progress)
    generated = generate(model, tokenizer, rows, cfg, bar)
    bar.close()
    timings["generate_s"] = time.perf_counter() - t0
    atomic.write_text(
        os.path.join(out_dir, "responses.jsonl"),
        "".join(
            json.dumps(
                {
                    "id": g.id,
                    "prompt": g.prompt,
                    "response": g.response,
                    "tokens": g.tokens,
                    "truncated_prompt": g.truncated,
                }
            )
            + "\n"
            for g in generated
        ),
    )
    responses = [g.response for g in generated]
    references = [r["response"] for r in rows]

    t0 = time.perf_counter()
    bs = bertscore(responses, references, cfg.bertscore)
    timings["bertscore_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    model_tox = detector.scores(responses)
    timings["toxicity_model_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    lexical = lexical_scores(responses)
    timings["toxicity_lexical_s"] = time.perf_counter() - t0
    tox_summary, flags = summarize(model_tox, lexical, cfg.toxicity)
    t0 = time.perf_counter()
    limit = context_size(model)
    ppl, nll = perplexity(model, tokenizer, rows, cfg.perplexity_batch_size, limit)
    timings["perplexity_s"] = time.perf_counter() - t0

    quality = [answers.per_sample(g.response, ref, g.ended) for g, ref in zip(generated, references, strict=False)]
    n = len(rows)
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    metrics = {
        "samples": n,
        "bertscore_precision": mean(bs["precision"]),
        "bertscore_recall": mean(bs["recall"]),
        "bertscore_f1": mean(bs["f1"]),
        "perplexity": ppl,
        "mean_nll": mean(nll),
        "truncated_prompts": sum(g.truncated for g in generated),
        "mean_response_tokens": mean([g.tokens for g in generated]),
        **answers.summarize(quality, responses, references),
        **tox_summary,
    }
    win, judged, theirs = None, None, None
    if production is not None and production.folder and cfg.win_rate.enabled:
        t0 = time.perf_counter()
        same = production.root == root  # the same bytes answer the same way: no second generation
        theirs = list(responses) if same else _production_answers(production.folder, rows, cfg, show_progress)
        judged = judging.judge(
            [r["prompt"] for r in rows], responses, theirs, references, cfg.win_rate.judge, cfg.bertscore, bs["f1"]
        )
        win = judging.win_rate(judged, cfg.win_rate.confidence, cfg.win_rate.bootstrap)
        metrics.update(win)
        metrics["production_exact_match"] = mean(
            [float(answers.exact_match(t, ref)) for t, ref in zip(theirs, references, strict=False)]
        )
        timings["win_rate_s"] = time.perf_counter() - t0
    base = base or forgetting.Base(None, None, "no base model given")
    forgot = None
    if base.folder and cfg.forgetting.enabled:
        t0 = time.perf_counter()
        forgot = forgetting.measure(model, tokenizer, base, cfg.forgetting, root)
        metrics.update(forgot)
        timings["forgetting_s"] = time.perf_counter() - t0
    blessed, checks = evaluate_gate(metrics, cfg.gate, baseline)
    checks += winrate.checks(
        win, cfg.gate, production.why_not if production is not None else "no model in production to compare with"
    )
    checks += forgetting.checks(forgot, cfg.gate.max_forgetting, base)
    blessed = all(c.passed for c in checks)
    samples = []
    for i, (g, row) in enumerate(zip(generated, rows, strict=False)):
        samples.append(
            {
                "id": g.id,
                "prompt": g.prompt,
                "reference": row["response"],
                "response": g.response,
                "bertscore_f1": bs["f1"][i],
                "bertscore_precision": bs["precision"][i],
                "bertscore_recall": bs["recall"][i],
                **quality[i],
                "nll": nll[i],
                "toxicity_lexical": lexical[i],
                **{f"toxicity_{c}": v[i] for c, v in model_tox.items()},
                "flagged": flags[i],
            }
        )
        if judged is not None:
            samples[-1].update(
                {"production_response": theirs[i], "judged": judged[i].outcome, "judge_margin": judged[i].margin}
            )
    atomic.write_text(os.path.join(out_dir, "samples.jsonl"), "".join(json.dumps(s) + "\n" for s in samples))
    result = {
        "blessed": blessed,
        "metrics": metrics,
        "checks": [c.to_json() for c in checks],
        "baseline": baseline,
        "compared_with": compared_with,
        "baseline_note": (
            f"{baseline_note}; change thresholds skipped" if baseline_note else "no baseline: change thresholds skipped"
        )
        if baseline is None
        else baseline_note,
        "win_rate": None
        if win is None
        else {
            **win,
            "judge": cfg.win_rate.judge.kind,
            "confidence": cfg.win_rate.confidence,
            "production": production.describe,
            "production_root": production.root,
            "same_model": same,
        },
        "forgetting": None if forgot is None else {**forgot, "base_root": base.root},
        "forgetting_note": base.why_not,
        "model_root": root,
        "decoding": cfg.generation.decoding().model_dump(),
        "detoxify": {"checkpoint": detector.path, "sha256": detector.sha256, "classes": detector.classes},
        "bertscore": {
            "model": cfg.bertscore.model,
            "num_layers": cfg.bertscore.num_layers,
            "idf": cfg.bertscore.idf,
            "rescaled": cfg.bertscore.rescale,
        },
        "timings": timings,
        "throughput": {k.replace("_s", "_samples_per_s"): n / v for k, v in timings.items() if k != "load_s" and v > 0},
    }
    atomic.write_json(
        os.path.join(out_dir, "metrics.json"),
        {"metrics": metrics, "model_root": root, "timings": timings, "throughput": result["throughput"]},
        default=_nan_safe,
    )
    atomic.write_json(
        os.path.join(out_dir, "blessing.json"),
        {
            "blessed": blessed,
            "model_root": root,
            "decoding": result["decoding"],
            "checks": result["checks"],
            "baseline_note": result["baseline_note"],
            **({"compared_with": compared_with} if compared_with is not None else {}),
        },
        default=_nan_safe,
    )
    result["samples"] = samples
    return result


@dataclass
class Production:
    """The model in production, as found for the win rate: its folder (None when not
    reachable from here, `why_not` saying why), its root and what it is."""

    folder: str | None
    root: str | None
    describe: str
    why_not: str = ""


def _production_answers(folder: str, rows: list[dict], cfg: EvalConfig, show_progress: bool) -> list[str]:
    """The production model's answers to the same prompts, through the same generation."""
    from kfp_llmops.components.common.generation import load_model

    from .generate import generate

    try:
        model, tokenizer = load_model(folder)
    except Exception as exc:  # noqa: BLE001 - a model that will not load is bad input
        raise InputError(f"{folder}: cannot load the production model: {exc}") from None
    bar = progress(len(rows), "production answers", unit="sample", enabled=show_progress)
    done = generate(model, tokenizer, rows, cfg, bar)
    bar.close()
    return [g.response for g in done]


def _nan_safe(value):
    return None if isinstance(value, float) and math.isnan(value) else value


__all__ = ["Production", "evaluate", "read_baseline"]
