"""verify_watermark: generate with the watermark on, detect it, calibrate the false
positive rate on unwatermarked text, measure robustness to token substitution and
deletion, and gate."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

import numpy as np

from kfp_llmops.components.common import answers, atomic, gates, generation, integrity
from kfp_llmops.components.common.decoding import Decoding
from kfp_llmops.components.common.detokenize import answer_text
from kfp_llmops.components.common.jsonl import read_eval_set
from kfp_llmops.components.common.watermark.kgw import logits_processor
from kfp_llmops.components.common.watermark.params import KGW

from .config import WatermarkConfig


def _generate(
    model, tokenizer, prompts: list[str], cfg: WatermarkConfig, processor, what: str = "texts"
) -> list[np.ndarray]:
    from kfp_llmops.components.common.progress import progress

    g = cfg.generation
    bar = progress(len(prompts), what, unit="text")
    done = generation.generate(
        model,
        tokenizer,
        prompts,
        max_new_tokens=g.max_new_tokens,
        min_new_tokens=g.min_new_tokens,
        temperature=g.temperature,
        batch_size=g.batch_size,
        seed=g.seed,
        processors=[processor] if processor else None,
        progress=bar,
    )
    bar.close()
    return [np.array(c.tokens, dtype=np.int64) for c in done]


def repetition(tokenizer, generated: list[np.ndarray]) -> float:
    """Mean share of repeated 3-grams in the decoded texts: a watermark that loops reads as
    low perplexity, so the two are reported together."""
    texts = [tokenizer.decode(t, skip_special_tokens=True) for t in generated]
    return sum(answers.repetition(t) for t in texts) / max(1, len(texts))


def _answers(model, tokenizer, rows: list[dict], cfg: WatermarkConfig, processor, decoding: Decoding) -> list[str]:
    """The eval prompts answered as evaluation answered them (the blessed decoding: what
    is served), up to EOS."""
    done = generation.generate(
        model,
        tokenizer,
        [r["prompt"] for r in rows],
        batch_size=cfg.quality.batch_size,
        seed=cfg.generation.seed,
        processors=[processor] if processor else None,
        **decoding.generate_kwargs(),
    )
    return [answer_text(tokenizer, c.tokens) for c in done]


@dataclass
class Answered:
    """An answer set and what it is worth."""

    texts: list[str]
    scores: dict  # exact_match, perplexity, bertscore_f1
    f1: list[float]  # each answer's BERTScore F1 (the default judge reuses them)


class Scorer:
    """What an answer set is worth: exact match and BERTScore F1 against the references,
    perplexity under the oracle (or the model itself); and how a judge compares two sets."""

    def __init__(self, model, tokenizer, rows: list[dict], cfg: WatermarkConfig):
        self.rows, self.cfg = rows, cfg
        q = cfg.quality
        if q.oracle_model:
            if not q.oracle_root:
                from kfp_llmops.components.common.errors import InputError

                raise InputError("quality.oracle_root: required with quality.oracle_model (its pinned Merkle root)")
            integrity.verify("model", q.oracle_model, q.oracle_root)
            model, tokenizer = generation.load_model(q.oracle_model)
        self.model, self.tokenizer = model, tokenizer

    def __call__(self, texts: list[str]) -> Answered:
        from kfp_llmops.components.common.perplexity import perplexity
        from kfp_llmops.components.common.similarity import bertscore

        rows, q = self.rows, self.cfg.quality
        answered = [{"prompt": r["prompt"], "response": t} for r, t in zip(rows, texts, strict=False)]
        ppl, _ = perplexity(self.model, self.tokenizer, answered, q.batch_size, generation.context_size(self.model))
        f1 = bertscore(texts, [r["response"] for r in rows], q.bertscore)["f1"]
        return Answered(
            texts,
            {
                "exact_match": sum(answers.exact_match(t, r["response"]) for t, r in zip(texts, rows, strict=False))
                / max(1, len(rows)),
                "perplexity": ppl,
                "bertscore_f1": sum(f1) / max(1, len(f1)),
            },
            f1,
        )

    def texts(self, prompts: list, generated: list[np.ndarray], tokenizer) -> float:
        """The long texts' perplexity under the oracle (the model itself without one), each
        given its prompt: what KGW reports as the watermark's cost to free text."""
        from kfp_llmops.components.common.perplexity import perplexity

        rows = [
            {"prompt": p, "response": tokenizer.decode(t, skip_special_tokens=True)}
            for p, t in zip(prompts, generated, strict=False)
        ]
        return perplexity(
            self.model, self.tokenizer, rows, self.cfg.quality.batch_size, generation.context_size(self.model)
        )[0]

    def versus(self, marked: Answered, plain: Answered) -> dict:
        """The judge's win rate of the watermarked answers against the unwatermarked ones."""
        from kfp_llmops.components.common.judging import judge, win_rate

        q = self.cfg.quality
        judged = judge(
            [r["prompt"] for r in self.rows],
            marked.texts,
            plain.texts,
            [r["response"] for r in self.rows],
            q.judge,
            q.bertscore,
            marked.f1,
            plain.f1,
        )
        return {f"judge_{k}": v for k, v in win_rate(judged, q.confidence, q.bootstrap).items()}


def cost(plain: dict, marked: dict) -> dict:
    """The watermark's cost: what it takes from exact match and BERTScore, what it adds to perplexity."""
    return {
        "exact_match_cost": plain["exact_match"] - marked["exact_match"],
        "perplexity_increase": marked["perplexity"] / plain["perplexity"] - 1,
        "bertscore_cost": plain["bertscore_f1"] - marked["bertscore_f1"],
    }


def quality_cost(
    model, tokenizer, rows: list[dict], cfg: WatermarkConfig, processor, score: Scorer, decoding: Decoding
) -> tuple[dict, Answered]:
    """The answers without and with the watermark (greedy, so the mark is the only
    difference), scored the same way; the cost is the difference, and the judge says
    which answer of each pair is better. Also returns the unwatermarked answers."""
    plain, marked = (score(_answers(model, tokenizer, rows, cfg, p, decoding)) for p in (None, processor))
    out = {f"{k}_unwatermarked": v for k, v in plain.scores.items()}
    out.update({f"{k}_watermarked": v for k, v in marked.scores.items()})
    return {**out, **cost(plain.scores, marked.scores), **score.versus(marked, plain)}, plain


def tradeoff(
    model,
    tokenizer,
    rows: list[dict],
    cfg: WatermarkConfig,
    key: int,
    plain: Answered,
    score: Scorer,
    decoding: Decoding,
) -> list[dict]:
    """Detection and cost at each of `quality.deltas`, the rest of the parameters unchanged."""
    curve = []
    for delta in cfg.quality.deltas:
        wm = KGW(**{**KGW.of(cfg).model_dump(), "delta": delta}).watermark(key, len(tokenizer))
        processor = logits_processor(wm)
        prompts = cfg.generation.detection_prompts(rows)[: cfg.quality.curve_prompts]
        tpr = _rate(wm.detect_many(_generate(model, tokenizer, prompts, cfg, processor)))[0]
        marked = score(_answers(model, tokenizer, rows, cfg, processor, decoding))
        curve.append(
            {
                "delta": delta,
                "tpr": tpr,
                **marked.scores,
                **cost(plain.scores, marked.scores),
                "judge_win_rate": score.versus(marked, plain)["judge_win_rate"],
            }
        )
    return curve


def scheme_rows(
    model,
    tokenizer,
    prompts: list,
    cfg: WatermarkConfig,
    key: int,
    plain: list[np.ndarray],
    references: list[np.ndarray],
    plain_ppl: float,
    score: Scorer,
) -> list[dict]:
    """Detection and the long texts' oracle perplexity for each of `quality.schemes`, at the
    config's gamma and delta, on the same prompts and against the same unwatermarked texts."""
    rows = []
    for scheme in dict.fromkeys(cfg.quality.schemes):
        if scheme == cfg.scheme:
            continue
        wm = KGW(**{**KGW.of(cfg).model_dump(), "scheme": scheme}).watermark(key, len(tokenizer))
        marked = _generate(model, tokenizer, prompts, cfg, logits_processor(wm), f"{scheme} texts")
        found = wm.detect_many(marked)
        ppl = score.texts(prompts, marked, tokenizer)
        rows.append(
            {
                "scheme": scheme,
                "tpr": _rate(found)[0],
                "fpr": _rate(wm.detect_many(plain) + wm.detect_many(references))[0],
                "mean_z_watermarked": _mean(found),
                "text_perplexity": ppl,
                "text_perplexity_increase": ppl / plain_ppl - 1,
                "text_repetition": repetition(tokenizer, marked),
            }
        )
    return rows


def attack(tokens: np.ndarray, rate: float, kind: str, vocab: int, rng: np.random.Generator) -> np.ndarray:
    """Random token substitution or deletion of `rate` of the tokens."""
    hit = rng.random(len(tokens)) < rate
    if kind == "deletion":
        return tokens[~hit]
    out = tokens.copy()
    out[hit] = rng.integers(0, vocab, int(hit.sum()))
    return out


def _rate(detections) -> tuple[float, int]:
    scored = [d for d in detections if d.tokens_scored >= 1 and d.z == d.z]
    if not scored:
        return float("nan"), 0
    return sum(d.watermarked for d in scored) / len(scored), len(scored)


@dataclass
class _Texts:
    """The detection texts, watermarked and not, the references, and their detections."""

    prompts: list
    marked: list
    plain: list
    references: list
    d_marked: list
    d_plain: list
    d_refs: list
    timing: dict


def _detection_texts(model, tokenizer, rows: list[dict], cfg: WatermarkConfig, kgw, wm) -> _Texts:
    """The same prompts continued with the watermark and without (timed: the processor's
    cost), and every text detected."""
    prompts = cfg.generation.detection_prompts(rows)
    t0 = time.perf_counter()
    marked = _generate(model, tokenizer, prompts, cfg, logits_processor(wm), f"{kgw.scheme} texts")
    t1 = time.perf_counter()
    plain = _generate(model, tokenizer, prompts, cfg, None, "unwatermarked texts")
    t2 = time.perf_counter()
    steps = sum(len(t) for t in plain) / max(1, cfg.generation.batch_size)  # decoding steps, about
    timing = {
        "generate_watermarked_s": t1 - t0,
        "generate_unwatermarked_s": t2 - t1,
        "processor_ms_per_step": 1000 * ((t1 - t0) - (t2 - t1)) / max(1.0, steps),
        "processor_overhead": (t1 - t0) / (t2 - t1) - 1,
    }
    references = [np.array(tokenizer.encode(r["response"])) for r in rows]
    return _Texts(
        prompts,
        marked,
        plain,
        references,
        wm.detect_many(marked, with_mask=True),
        wm.detect_many(plain),
        wm.detect_many(references),
        timing,
    )


def _robustness(texts: _Texts, cfg: WatermarkConfig, wm, vocab: int) -> dict:
    """The detection rate after each attack at each rate, one seeded generator throughout."""
    rng = np.random.default_rng(cfg.attack_seed)
    robustness = {}
    for kind in ("substitution", "deletion"):
        for rate in cfg.attack_rates:
            attacked = [attack(t, rate, kind, vocab, rng) for t in texts.marked]
            robustness[f"tpr_{kind}_{int(round(rate * 100))}"] = _rate(wm.detect_many(attacked))[0]
    return robustness


def _checks(cfg: WatermarkConfig, metrics: dict, model_dir: str, key: int) -> list:
    """The gate: detection, calibration, robustness, what the watermark costs the answers,
    and the weight watermark (its figures added to `metrics`)."""
    g = cfg.gate
    checks = [
        gates.at_least("tpr", metrics["tpr"], g.min_tpr),
        gates.at_most("fpr", metrics["fpr"], g.max_fpr),
        gates.at_least("tpr_substitution_10", metrics.get("tpr_substitution_10"), g.min_tpr_substitution_10),
    ]
    for name, bound, what in (
        ("exact_match_cost", g.max_exact_match_cost, "exact-match answers lost to the watermark"),
        ("perplexity_increase", g.max_perplexity_increase, "relative rise of the answers' perplexity"),
        ("bertscore_cost", g.max_bertscore_cost, "BERTScore F1 lost to the watermark"),
    ):
        if bound is not None:
            checks.append(gates.at_most(name, metrics[name], bound, what))
    if g.min_judge_win_rate is not None:
        checks.append(
            gates.at_least(
                "judge_win_rate",
                metrics["judge_win_rate"],
                g.min_judge_win_rate,
                f"the watermarked answers against the unwatermarked, judged by {cfg.quality.judge.kind}",
            )
        )
    if cfg.weights.enabled:
        from kfp_llmops.components.common.watermark.weights import extract_from_model_dir

        found = extract_from_model_dir(model_dir, key, cfg.weights)
        metrics.update({"bit_accuracy": found.bit_accuracy, "bit_p_value": found.p_value, "bits": found.bits})
        checks += [
            gates.at_least("bit_accuracy", found.bit_accuracy, g.min_bit_accuracy),
            gates.at_most("bit_p_value", found.p_value, g.max_bit_p_value),
        ]
    return checks


def verify(
    model_dir: str,
    eval_path: str,
    out_dir: str,
    cfg: WatermarkConfig,
    key: int,
    model_root: str | None = None,
    decoding: Decoding | None = None,
) -> dict:
    """`decoding`: the one the blessing recorded, which the cost is measured under (what
    is served); without one, greedy up to `quality.max_new_tokens`. The result records it."""
    decoding = decoding or Decoding(max_new_tokens=cfg.quality.max_new_tokens)
    os.makedirs(out_dir, exist_ok=True)
    root = integrity.verify("model", model_dir, model_root)
    rows = read_eval_set(eval_path)
    model, tokenizer = generation.load_model(model_dir)
    kgw = KGW.of(cfg)
    wm = kgw.watermark(key, len(tokenizer))
    texts = _detection_texts(model, tokenizer, rows, cfg, kgw, wm)
    prompts, marked, plain = texts.prompts, texts.marked, texts.plain
    tpr, n_pos = _rate(texts.d_marked)
    fpr, n_neg = _rate(texts.d_plain + texts.d_refs)
    score = Scorer(model, tokenizer, rows, cfg)
    quality, plain_answers = quality_cost(model, tokenizer, rows, cfg, logits_processor(wm), score, decoding)
    robustness = _robustness(texts, cfg, wm, len(tokenizer))
    plain_ppl, marked_ppl = (score.texts(prompts, t, tokenizer) for t in (plain, marked))
    metrics = {
        "tpr": tpr,
        "fpr": fpr,
        "positives_scored": n_pos,
        "negatives_scored": n_neg,
        "text_perplexity_unwatermarked": plain_ppl,
        "text_perplexity_watermarked": marked_ppl,
        "text_perplexity_increase": marked_ppl / plain_ppl - 1,
        **texts.timing,
        "text_repetition_unwatermarked": repetition(tokenizer, plain),
        "text_repetition_watermarked": repetition(tokenizer, marked),
        "references_scored": sum(d.z == d.z for d in texts.d_refs),
        "mean_z_watermarked": _mean(texts.d_marked),
        "mean_z_unwatermarked": _mean(texts.d_plain + texts.d_refs),
        **robustness,
        **quality,
    }
    checks = _checks(cfg, metrics, model_dir, key)
    verified = gates.passed(checks)
    curve = tradeoff(model, tokenizer, rows, cfg, key, plain_answers, score, decoding)
    schemes = [_scheme_row(kgw.scheme, metrics)]
    if cfg.quality.schemes:
        schemes += scheme_rows(model, tokenizer, prompts, cfg, key, plain, texts.references, plain_ppl, score)
    _write_texts(out_dir, rows, texts, cfg, tokenizer)
    result = {
        "verified": verified,
        "metrics": metrics,
        "checks": [c.to_json() for c in checks],
        "model_root": root,
        "tradeoff": curve,
        "schemes": schemes,
        "detection": _described(cfg, len(prompts)),
        "kgw": kgw.model_dump(),
        "decoding": decoding.model_dump(),
        "z_threshold": kgw.z_threshold,
        "z_watermarked": [d.z for d in texts.d_marked],
        "z_unwatermarked": [d.z for d in texts.d_plain + texts.d_refs],
        "highlights": [_highlight(tokenizer, t, d) for t, d in list(zip(marked, texts.d_marked, strict=False))[:3]],
    }
    atomic.write_json(
        os.path.join(out_dir, "metrics.json"),
        {
            k: result[k]
            for k in ("verified", "metrics", "checks", "model_root", "kgw", "decoding", "tradeoff", "schemes")
        },
    )
    return result


def _scheme_row(scheme: str, metrics: dict) -> dict:
    """The served scheme's row of the comparison table."""
    return {
        "scheme": scheme,
        "tpr": metrics["tpr"],
        "fpr": metrics["fpr"],
        "mean_z_watermarked": metrics["mean_z_watermarked"],
        "text_perplexity": metrics["text_perplexity_watermarked"],
        "text_perplexity_increase": metrics["text_perplexity_increase"],
        "text_repetition": metrics["text_repetition_watermarked"],
    }


def _described(cfg: WatermarkConfig, texts: int) -> str:
    """What the detection texts were, for the report."""
    gen = cfg.generation
    distinct = list(dict.fromkeys(gen.prompts))
    where = f"{len(distinct)} open-ended prompts ({'; '.join(distinct)})" if distinct else "the eval prompts"
    return (
        f"{texts} texts of {gen.min_new_tokens}–{gen.max_new_tokens} new tokens "
        f"continuing {where}, sampled at temperature {gen.temperature:g}"
    )


def _write_texts(out_dir: str, rows: list[dict], texts: _Texts, cfg: WatermarkConfig, tokenizer) -> None:
    """watermarked.jsonl: each watermarked text with its detection."""
    gen = cfg.generation
    ids = [r["id"] for r in rows] if not gen.prompts else [f"text-{i:04d}" for i in range(len(texts.prompts))]
    atomic.write_text(
        os.path.join(out_dir, "watermarked.jsonl"),
        "".join(
            json.dumps({"id": ident, "prompt": prompt, "response": tokenizer.decode(toks), **d.to_json()}) + "\n"
            for ident, prompt, toks, d in zip(ids, texts.prompts, texts.marked, texts.d_marked, strict=False)
        ),
    )


def _mean(detections) -> float:
    zs = [d.z for d in detections if d.z == d.z]
    return sum(zs) / len(zs) if zs else float("nan")


def _highlight(tokenizer, tokens: np.ndarray, detection) -> list[tuple[str, bool | None]]:
    """(token text, green?) per token; the first `width` tokens have no context (None)."""
    width = len(tokens) - len(detection.green_mask)
    return [
        (tokenizer.decode([int(t)]), None if i < width else bool(detection.green_mask[i - width]))
        for i, t in enumerate(tokens)
    ]
