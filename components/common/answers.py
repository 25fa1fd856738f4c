"""Checks that catch degenerate output, which BERTScore alone lets through: a model that
answers every question with the same fluent-looking string, loops, stops at nothing or
says nothing. All are computed on the decoded text, so any tokenizer compares alike.

- exact_match: the response equals the reference after SQuAD-style normalisation
  (lower case, punctuation and articles dropped, whitespace collapsed);
- repetition_rate: mean share of repeated 3-grams within a response (seq-rep-3,
  Welleck et al. 2019); "The18The18The18" scores high, a normal sentence 0;
- distinct_2: unique bigrams over all bigrams across the responses (Li et al. 2016),
  and distinct_2_ratio, the same over the references' (a model that says one thing to
  every prompt is far below 1);
- empty_rate: responses with no text;
- unfinished_rate: responses cut at max_new_tokens without ending (no EOS).
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

_TOKEN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]|[^\W\d_]+|\d+|[^\w\s]")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation + "。，、！？：；")


def normalize(text: str) -> str:
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


def tokens(text: str) -> list[str]:
    """Letter runs, digit runs, single Han characters and punctuation marks."""
    return _TOKEN.findall(text)


def _ngrams(toks: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)]


def repetition(text: str, n: int = 3) -> float:
    grams = _ngrams(tokens(text), n)
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def distinct(texts: Sequence[str], n: int = 2) -> float:
    grams = [g for t in texts for g in _ngrams(tokens(t), n)]
    return len(set(grams)) / len(grams) if grams else 0.0


def exact_match(response: str, reference: str) -> bool:
    return normalize(response) == normalize(reference)


def per_sample(response: str, reference: str, ended: bool) -> dict:
    return {
        "exact_match": exact_match(response, reference),
        "repetition": repetition(response),
        "empty": not response.strip(),
        "unfinished": not ended,
    }


def summarize(samples: Sequence[dict], responses: Sequence[str], references: Sequence[str]) -> dict:
    """The metrics above over the eval set (NaN-free: an empty set gives 0s)."""
    n = max(1, len(samples))
    ours, theirs = distinct(responses), distinct(references)
    return {
        "exact_match": sum(s["exact_match"] for s in samples) / n,
        "repetition_rate": sum(s["repetition"] for s in samples) / n,
        "distinct_2": ours,
        "distinct_2_ratio": ours / theirs if theirs else 0.0,
        "empty_rate": sum(s["empty"] for s in samples) / n,
        "unfinished_rate": sum(s["unfinished"] for s in samples) / n,
    }
