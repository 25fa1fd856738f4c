"""Win rate against production: the candidate and the model in production answer the
same held-out prompts, and a pinned judge decides each pair (the pairwise evaluation of
Vertex AI AutoSxS, AlpacaEval and Chatbot Arena).

Judges (`win_rate.judge.kind`):
- `bertscore` (the default, no judge model): each answer's BERTScore F1 against the
  reference; the better one wins.
- `reward`: a sequence classifier with one logit that scores (prompt, answer) alone.
- `pairwise`: a sequence classifier with one logit that reads (prompt, answers A and B)
  and is positive when A is better. It judges both orders and the verdict is half the
  difference, so a judge that favours the first slot by a constant has that bias
  cancelled; how often the two orders agree is reported as its position consistency.

A judge model is a sealed local folder whose Merkle root is pinned. Pointwise judges
(`bertscore`, `reward`) score each answer alone, so order cannot bias them. Answers that
normalize the same are ties without asking the judge, and so is a score difference
within `tie_margin`. The win rate counts a tie as half; its interval is a percentile
bootstrap over prompts with a fixed seed, so a rerun reports the same interval.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from kfp_llmops.components.common import answers, integrity
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.gates import Check

from kfp_llmops.components.common.similarity import BertScoreConfig

from .config import JudgeConfig, WinRateConfig

KIND = "win rate"


@dataclass
class Judged:
    outcome: int                  # +1 the candidate wins, 0 tie, -1 production wins
    margin: float                 # the judge's score difference, candidate minus production
    consistent: bool | None       # pairwise only: both orders preferred the same answer


def judge(prompts: list[str], candidate: list[str], production: list[str], references: list[str],
          cfg: JudgeConfig, bertscore_cfg: BertScoreConfig, candidate_f1: list[float] | None = None) -> list[Judged]:
    """One verdict per prompt."""
    differ = [i for i, (a, b) in enumerate(zip(candidate, production)) if answers.normalize(a) != answers.normalize(b)]
    margins = {i: 0.0 for i in range(len(prompts))}
    consistent: dict[int, bool | None] = {}
    if differ and cfg.kind == "bertscore":
        from kfp_llmops.components.common.similarity import bertscore
        base = bertscore([production[i] for i in differ], [references[i] for i in differ], bertscore_cfg)["f1"]
        cand = ([candidate_f1[i] for i in differ] if candidate_f1 is not None else
                bertscore([candidate[i] for i in differ], [references[i] for i in differ], bertscore_cfg)["f1"])
        margins.update({i: c - b for i, c, b in zip(differ, cand, base)})
    elif differ:
        model = JudgeModel(cfg)
        if cfg.kind == "reward":
            scores = model.scores([prompts[i] for i in differ] * 2,
                                  [candidate[i] for i in differ] + [production[i] for i in differ])
            margins.update({i: scores[k] - scores[k + len(differ)] for k, i in enumerate(differ)})
        else:
            pair = cfg.pair_template.format
            firsts = [prompts[i] for i in differ] * 2
            seconds = ([pair(a=candidate[i], b=production[i]) for i in differ] +
                       [pair(a=production[i], b=candidate[i]) for i in differ])
            scores = model.scores(firsts, seconds)
            for k, i in enumerate(differ):
                forward, backward = scores[k], scores[k + len(differ)]
                margins[i] = (forward - backward) / 2
                consistent[i] = (forward > 0) != (backward > 0)
    return [Judged(0 if abs(m) <= cfg.tie_margin else (1 if m > 0 else -1), m, consistent.get(i))
            for i, m in margins.items()]


class JudgeModel:
    """A one-logit sequence classifier from a sealed folder, verified against its root first."""

    def __init__(self, cfg: JudgeConfig):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging as hf_logging

        integrity.verify("model", cfg.path, cfg.root)
        hf_logging.set_verbosity_error()
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(cfg.path)
            self.model = AutoModelForSequenceClassification.from_pretrained(cfg.path, dtype=torch.float32).eval()
        except Exception as exc:  # noqa: BLE001 - a judge that will not load is bad input
            raise InputError(f"win_rate.judge.path: {cfg.path}: cannot load a sequence classifier: {exc}") from None
        if self.model.config.num_labels != 1:
            raise InputError(f"win_rate.judge.path: {cfg.path}: the judge must have one output (num_labels 1), "
                             f"it has {self.model.config.num_labels}")
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.cfg = cfg

    def scores(self, firsts: list[str], seconds: list[str]) -> list[float]:
        import torch

        out: list[float] = []
        for start in range(0, len(firsts), self.cfg.batch_size):
            batch = self.tokenizer(firsts[start:start + self.cfg.batch_size], seconds[start:start + self.cfg.batch_size],
                                   truncation=True, max_length=self.cfg.max_length, padding=True, return_tensors="pt")
            with torch.no_grad():
                out += self.model(**batch).logits[:, 0].tolist()
        return out


def summarize(judged: list[Judged], cfg: WinRateConfig) -> dict:
    """Win rate (ties half), its bootstrap interval, and the counts, as metrics."""
    import numpy as np

    n = len(judged)
    points = np.array([(j.outcome + 1) / 2 for j in judged], dtype=np.float64)
    rng = np.random.default_rng(0)
    means = points[rng.integers(0, n, size=(cfg.bootstrap, n))].mean(axis=1) if n else np.array([math.nan])
    tail = (1 - cfg.confidence) / 2 * 100
    lower, upper = np.percentile(means, [tail, 100 - tail]) if n else (math.nan, math.nan)
    pairwise = [j.consistent for j in judged if j.consistent is not None]
    out = {"win_rate": float(points.mean()) if n else math.nan, "win_rate_lower": float(lower),
           "win_rate_upper": float(upper), "wins": sum(j.outcome > 0 for j in judged),
           "ties": sum(j.outcome == 0 for j in judged), "losses": sum(j.outcome < 0 for j in judged)}
    if pairwise:
        out["judge_position_consistency"] = sum(pairwise) / len(pairwise)
    return out


def checks(summary: dict | None, cfg: WinRateConfig, why_not: str) -> list[Check]:
    """The gate's win-rate checks; skipped, saying why, when there is no production model."""
    wanted = [(name, bound) for name, bound in (("win_rate", cfg.min_win_rate), ("win_rate_lower", cfg.min_lower_bound))
              if bound is not None]
    out = []
    for name, bound in wanted:
        if summary is None:
            out.append(Check(name, None, f">= {bound:g}", "skipped", why_not, KIND))
            continue
        value = summary[name]
        ok = not math.isnan(value) and value >= bound - 1e-12
        out.append(Check(name, value, f">= {bound:g}", "pass" if ok else "fail",
                         f"{summary['wins']} wins, {summary['ties']} ties, {summary['losses']} losses", KIND))
    return out


def headline(summary: dict, judge_kind: str, against: str, confidence: float, same_model: bool = False) -> str:
    same = " The candidate is the model in production (the same Merkle root)." if same_model else ""
    return (f"Against {against}: {summary['wins']} wins, {summary['ties']} ties, {summary['losses']} losses; "
            f"win rate {summary['win_rate']:.3f} ({confidence:.0%} interval {summary['win_rate_lower']:.3f}–"
            f"{summary['win_rate_upper']:.3f}), judged by {judge_kind}.{same}")
