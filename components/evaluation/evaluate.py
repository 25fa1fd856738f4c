"""evaluate_llm: generate responses, score them (exact match, BERTScore, two toxicity
detectors), compute reference perplexity, judge them against the model in production
(win rate), and bless or refuse the model."""

from __future__ import annotations

import contextlib
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


class _Clock:
    """Seconds per named step: the report's timings and throughput."""

    def __init__(self):
        self.timings: dict[str, float] = {}

    @contextlib.contextmanager
    def step(self, name: str):
        t0 = time.perf_counter()
        yield
        self.timings[name] = time.perf_counter() - t0

    def throughput(self, samples: int) -> dict[str, float]:
        """Samples a second of each step after loading."""
        return {
            k.replace("_s", "_samples_per_s"): samples / v for k, v in self.timings.items() if k != "load_s" and v > 0
        }


@dataclass
class _Scores:
    """Every per-sample score of the candidate's answers, and their summaries."""

    bertscore: dict
    model_toxicity: dict
    lexical: list
    toxicity_summary: dict
    flags: list
    perplexity: float
    nll: list


@dataclass
class _Judged:
    """The win rate against production: its summary, each sample's outcome, production's
    answers, and whether production is the candidate's very bytes."""

    win: dict
    judged: list
    theirs: list
    same: bool

    def metrics(self, references: list[str]) -> dict:
        """The win rate and production's own exact match on the same questions."""
        matched = [float(answers.exact_match(t, ref)) for t, ref in zip(self.theirs, references, strict=False)]
        return {**self.win, "production_exact_match": _mean(matched)}


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

    from . import winrate
    from .toxicity import ModelDetector

    hf_logging.disable_progress_bar()
    os.makedirs(out_dir, exist_ok=True)
    root = integrity.verify("model", model_dir, model_root)
    rows = read_eval_set(eval_path)
    baseline = read_baseline(baseline_path) if baseline_path else baseline_metrics
    detector = ModelDetector(cfg.toxicity)  # pin checked before anything heavy runs
    clock = _Clock()
    with clock.step("load_s"):
        model, tokenizer = _load(model_dir, "the model")
    generated = _generate(model, tokenizer, rows, cfg, out_dir, clock, show_progress)
    references = [r["response"] for r in rows]
    scores = _score(model, tokenizer, rows, generated, cfg, detector, clock)
    quality = [answers.per_sample(g.response, ref, g.ended) for g, ref in zip(generated, references, strict=False)]
    metrics = _metrics(generated, references, scores, quality)
    judged = None
    if production is not None and production.folder and cfg.win_rate.enabled:
        with clock.step("win_rate_s"):
            judged = _judge(production, root, rows, generated, scores, cfg, show_progress)
        metrics.update(judged.metrics(references))
    base = base or forgetting.Base(None, None, "no base model given")
    forgot = None
    if base.folder and cfg.forgetting.enabled:
        with clock.step("forgetting_s"):
            forgot = forgetting.measure(model, tokenizer, base, cfg.forgetting, root)
        metrics.update(forgot)
    _, checks = evaluate_gate(metrics, cfg.gate, baseline)
    why_not = production.why_not if production is not None else "no model in production to compare with"
    checks += winrate.checks(judged and judged.win, cfg.gate, why_not)
    checks += forgetting.checks(forgot, cfg.gate.max_forgetting, base)
    samples = _samples(generated, rows, scores, quality, judged)
    atomic.write_text(os.path.join(out_dir, "samples.jsonl"), "".join(json.dumps(s) + "\n" for s in samples))
    result = {
        "blessed": all(c.passed for c in checks),
        "metrics": metrics,
        "checks": [c.to_json() for c in checks],
        "baseline": baseline,
        "compared_with": compared_with,
        "baseline_note": _baseline_note(baseline, baseline_note),
        "win_rate": None if judged is None else _win_record(judged, production, cfg),
        "forgetting": None if forgot is None else {**forgot, "base_root": base.root},
        "forgetting_note": base.why_not,
        "model_root": root,
        **_settings(cfg, detector),
        "timings": clock.timings,
        "throughput": clock.throughput(len(rows)),
    }
    _write_outputs(out_dir, result, compared_with)
    result["samples"] = samples
    return result


def _settings(cfg: EvalConfig, detector) -> dict:
    """What the scores were measured with: the decoding, the toxicity checkpoint, BERTScore."""
    return {
        "decoding": cfg.generation.decoding().model_dump(),
        "detoxify": {"checkpoint": detector.path, "sha256": detector.sha256, "classes": detector.classes},
        "bertscore": {
            "model": cfg.bertscore.model,
            "num_layers": cfg.bertscore.num_layers,
            "idf": cfg.bertscore.idf,
            "rescaled": cfg.bertscore.rescale,
        },
    }


def _baseline_note(baseline: dict | None, note: str | None) -> str | None:
    if baseline is not None:
        return note
    return f"{note}; change thresholds skipped" if note else "no baseline: change thresholds skipped"


def _mean(xs: list) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _generate(model, tokenizer, rows: list[dict], cfg: EvalConfig, out_dir: str, clock: _Clock, show_progress: bool):
    """The candidate's answers through the one generation routine, written as responses.jsonl."""
    from .generate import generate

    with clock.step("generate_s"):
        bar = progress(len(rows), "generate", unit="sample", enabled=show_progress)
        generated = generate(model, tokenizer, rows, cfg, bar)
        bar.close()
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
    return generated


def _score(model, tokenizer, rows, generated, cfg: EvalConfig, detector, clock: _Clock) -> _Scores:
    """BERTScore against the references, both toxicity detectors, reference perplexity."""
    from kfp_llmops.components.common.generation import context_size
    from kfp_llmops.components.common.perplexity import perplexity
    from kfp_llmops.components.common.similarity import bertscore

    from .toxicity import lexical_scores, summarize

    responses = [g.response for g in generated]
    with clock.step("bertscore_s"):
        bs = bertscore(responses, [r["response"] for r in rows], cfg.bertscore)
    with clock.step("toxicity_model_s"):
        model_tox = detector.scores(responses)
    with clock.step("toxicity_lexical_s"):
        lexical = lexical_scores(responses)
    tox_summary, flags = summarize(model_tox, lexical, cfg.toxicity)
    with clock.step("perplexity_s"):
        ppl, nll = perplexity(model, tokenizer, rows, cfg.perplexity_batch_size, context_size(model))
    return _Scores(bs, model_tox, lexical, tox_summary, flags, ppl, nll)


def _metrics(generated, references: list[str], scores: _Scores, quality: list[dict]) -> dict:
    responses = [g.response for g in generated]
    bs = scores.bertscore
    return {
        "samples": len(generated),
        "bertscore_precision": _mean(bs["precision"]),
        "bertscore_recall": _mean(bs["recall"]),
        "bertscore_f1": _mean(bs["f1"]),
        "perplexity": scores.perplexity,
        "mean_nll": _mean(scores.nll),
        "truncated_prompts": sum(g.truncated for g in generated),
        "mean_response_tokens": _mean([g.tokens for g in generated]),
        **answers.summarize(quality, responses, references),
        **scores.toxicity_summary,
    }


def _judge(production: Production, root: str, rows, generated, scores: _Scores, cfg: EvalConfig, show_progress):
    """Production's answers to the same prompts (the candidate's own when the bytes are the
    same: no second generation), judged against the candidate's."""
    from kfp_llmops.components.common import judging

    responses = [g.response for g in generated]
    same = production.root == root
    theirs = list(responses) if same else _production_answers(production.folder, rows, cfg, show_progress)
    judged = judging.judge(
        [r["prompt"] for r in rows],
        responses,
        theirs,
        [r["response"] for r in rows],
        cfg.win_rate.judge,
        cfg.bertscore,
        scores.bertscore["f1"],
    )
    return _Judged(judging.win_rate(judged, cfg.win_rate.confidence, cfg.win_rate.bootstrap), judged, theirs, same)


def _win_record(judged: _Judged, production: Production, cfg: EvalConfig) -> dict:
    return {
        **judged.win,
        "judge": cfg.win_rate.judge.kind,
        "confidence": cfg.win_rate.confidence,
        "production": production.describe,
        "production_root": production.root,
        "same_model": judged.same,
    }


def _samples(generated, rows, scores: _Scores, quality: list[dict], judged: _Judged | None) -> list[dict]:
    """One record a sample: its answer, every score, and production's answer where judged."""
    bs, samples = scores.bertscore, []
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
                "nll": scores.nll[i],
                "toxicity_lexical": scores.lexical[i],
                **{f"toxicity_{c}": v[i] for c, v in scores.model_toxicity.items()},
                "flagged": scores.flags[i],
            }
        )
        if judged is not None:
            samples[-1].update(
                {
                    "production_response": judged.theirs[i],
                    "judged": judged.judged[i].outcome,
                    "judge_margin": judged.judged[i].margin,
                }
            )
    return samples


def _write_outputs(out_dir: str, result: dict, compared_with: dict | None) -> None:
    """metrics.json (what later releases compare with) and blessing.json (what deploy reads)."""
    root = result["model_root"]
    atomic.write_json(
        os.path.join(out_dir, "metrics.json"),
        {
            "metrics": result["metrics"],
            "model_root": root,
            "timings": result["timings"],
            "throughput": result["throughput"],
        },
        default=_nan_safe,
    )
    atomic.write_json(
        os.path.join(out_dir, "blessing.json"),
        {
            "blessed": result["blessed"],
            "model_root": root,
            "decoding": result["decoding"],
            "checks": result["checks"],
            "baseline_note": result["baseline_note"],
            **({"compared_with": compared_with} if compared_with is not None else {}),
        },
        default=_nan_safe,
    )


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
    from .generate import generate

    model, tokenizer = _load(folder, "the production model")
    bar = progress(len(rows), "production answers", unit="sample", enabled=show_progress)
    done = generate(model, tokenizer, rows, cfg, bar)
    bar.close()
    return [g.response for g in done]


def _load(folder: str, what: str):
    from kfp_llmops.components.common.generation import load_model

    try:
        return load_model(folder)
    except Exception as exc:  # noqa: BLE001 - a model that will not load is bad input
        raise InputError(f"{folder}: cannot load {what}: {exc}") from None


def _nan_safe(value):
    return None if isinstance(value, float) and math.isnan(value) else value


__all__ = ["Production", "evaluate", "read_baseline"]
