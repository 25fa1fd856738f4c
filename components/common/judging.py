"""Pairwise judgement of two answer sets to the same prompts, and the win rate with its
interval (the pairwise evaluation of Vertex AI AutoSxS, AlpacaEval and Chatbot Arena):
evaluation's candidate against the model in production, and the watermark's answers
against the same model's unwatermarked ones.

Judges (`judge.kind`):
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
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from . import answers, integrity
from .conversation import Prompt, prompt_text
from .errors import InputError
from .similarity import BertScoreConfig


class JudgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    kind: Literal["bertscore", "reward", "pairwise"] = Field(
        "bertscore",
        description="bertscore: each answer's F1 against the reference (no judge model); reward: a "
        "one-logit sequence classifier scoring (prompt, answer); pairwise: a one-logit "
        "classifier reading (prompt, answer A and B), > 0 when A is better.",
    )
    path: str | None = Field(None, description="The judge model's local folder, sealed (`llmops model seal`).")
    root: str | None = Field(None, description="Its pinned Merkle root (required with path).")
    pair_template: str = Field(
        "Answer A: {a}\nAnswer B: {b}",
        description="How a pairwise judge reads the two answers (the prompt is the first text).",
    )
    tie_margin: float = Field(0.01, ge=0, description="Score differences up to this are ties.")
    max_length: int = Field(512, ge=8)
    batch_size: int = Field(16, ge=1)

    @model_validator(mode="after")
    def _pinned(self) -> JudgeConfig:
        if self.kind != "bertscore" and not (self.path and self.root):
            raise ValueError(f"judge kind {self.kind!r} needs path and root (the root `llmops model seal` printed)")
        return self


@dataclass
class Judged:
    outcome: int  # +1 the candidate wins, 0 tie, -1 production wins
    margin: float  # the judge's score difference, candidate minus production
    consistent: bool | None  # pairwise only: both orders preferred the same answer


def judge(
    prompts: list[Prompt],
    candidate: list[str],
    production: list[str],
    references: list[str],
    cfg: JudgeConfig,
    bertscore_cfg: BertScoreConfig,
    candidate_f1: list[float] | None = None,
    production_f1: list[float] | None = None,
) -> list[Judged]:
    """One verdict per prompt. The BERTScore judge reuses per-answer F1 already computed.
    A model judge reads a conversation's turns as `role: content` lines."""
    prompts = [prompt_text(p) for p in prompts]
    pairs = enumerate(zip(candidate, production, strict=False))
    differ = [i for i, (a, b) in pairs if answers.normalize(a) != answers.normalize(b)]
    margins = {i: 0.0 for i in range(len(prompts))}
    consistent: dict[int, bool | None] = {}
    if differ and cfg.kind == "bertscore":
        from .similarity import bertscore

        def f1(answers: list[str], known: list[float] | None) -> list[float]:
            if known is not None:
                return [known[i] for i in differ]
            return bertscore([answers[i] for i in differ], [references[i] for i in differ], bertscore_cfg)["f1"]

        base, cand = f1(production, production_f1), f1(candidate, candidate_f1)
        margins.update({i: c - b for i, c, b in zip(differ, cand, base, strict=False)})
    elif differ:
        model = JudgeModel(cfg)
        if cfg.kind == "reward":
            scores = model.scores(
                [prompts[i] for i in differ] * 2, [candidate[i] for i in differ] + [production[i] for i in differ]
            )
            margins.update({i: scores[k] - scores[k + len(differ)] for k, i in enumerate(differ)})
        else:
            pair = cfg.pair_template.format
            firsts = [prompts[i] for i in differ] * 2
            seconds = [pair(a=candidate[i], b=production[i]) for i in differ] + [
                pair(a=production[i], b=candidate[i]) for i in differ
            ]
            scores = model.scores(firsts, seconds)
            for k, i in enumerate(differ):
                forward, backward = scores[k], scores[k + len(differ)]
                margins[i] = (forward - backward) / 2
                consistent[i] = (forward > 0) != (backward > 0)
    return [
        Judged(0 if abs(m) <= cfg.tie_margin else (1 if m > 0 else -1), m, consistent.get(i))
        for i, m in margins.items()
    ]


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
            raise InputError(f"judge.path: {cfg.path}: cannot load a sequence classifier: {exc}") from None
        if self.model.config.num_labels != 1:
            raise InputError(
                f"judge.path: {cfg.path}: the judge must have one output (num_labels 1), "
                f"it has {self.model.config.num_labels}"
            )
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.cfg = cfg

    def scores(self, firsts: list[str], seconds: list[str]) -> list[float]:
        import torch

        out: list[float] = []
        for start in range(0, len(firsts), self.cfg.batch_size):
            batch = self.tokenizer(
                firsts[start : start + self.cfg.batch_size],
                seconds[start : start + self.cfg.batch_size],
                truncation=True,
                max_length=self.cfg.max_length,
                padding=True,
                return_tensors="pt",
            )
            with torch.no_grad():
                out += self.model(**batch).logits[:, 0].tolist()
        return out


def win_rate(judged: list[Judged], confidence: float = 0.95, bootstrap: int = 2000) -> dict:
    """Win rate (ties half), its percentile-bootstrap interval (seed 0), and the counts."""
    import numpy as np

    n = len(judged)
    points = np.array([(j.outcome + 1) / 2 for j in judged], dtype=np.float64)
    rng = np.random.default_rng(0)
    means = points[rng.integers(0, n, size=(bootstrap, n))].mean(axis=1) if n else np.array([math.nan])
    tail = (1 - confidence) / 2 * 100
    lower, upper = np.percentile(means, [tail, 100 - tail]) if n else (math.nan, math.nan)
    pairwise = [j.consistent for j in judged if j.consistent is not None]
    out = {
        "win_rate": float(points.mean()) if n else math.nan,
        "win_rate_lower": float(lower),
        "win_rate_upper": float(upper),
        "wins": sum(j.outcome > 0 for j in judged),
        "ties": sum(j.outcome == 0 for j in judged),
        "losses": sum(j.outcome < 0 for j in judged),
    }
    if pairwise:
        out["judge_position_consistency"] = sum(pairwise) / len(pairwise)
    return out
