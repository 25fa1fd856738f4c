"""The BERTScore rescaling baseline for the bundled MiniLM, made the way bert-score made
its own (Zhang et al. 2020, section 4: the mean score of random pairs of unrelated
sentences, per layer), and pinned.

bert-score ships baselines for the large models, none for all-MiniLM-L6-v2, whose raw
F1 of unrelated sentences is 0.25 at its last layer (up to 0.57 at layer 5): a raw 0.6
reads as "good" and is much closer to chance than it looks. Rescaled, (x - b) / (1 - b),
chance is 0.

The sentences come from the Python standard library's own prose (`pydoc_data.topics`,
the language reference that ships with every CPython), so the baseline is rebuilt on
any machine without a download; `llmops bertscore-baseline` rebuilds it, and a test
rebuilds it and compares with the pinned file. A patch release of Python may edit that
prose, which can move the figures in the third decimal place.
"""

from __future__ import annotations

import csv
import io
import os
import random

from .errors import InputError
from .integrity import sha256_file
from .prose import sentences

BUNDLED = os.path.join(os.path.dirname(__file__), "baselines", "minilm-l6.csv")
BUNDLED_SHA256 = "ba726050c055b079476f74363aca81b36f80e69cf297ee6684e6e2b8671c1d33"
PAIRS, SEED = 4000, 0


def build(model: str, num_layers: int, pairs: int = PAIRS, seed: int = SEED) -> str:
    """CSV text of mean P, R, F per layer 0..num_layers over `pairs` random pairs."""
    import bert_score

    pool = sentences()
    rng = random.Random(seed)
    cands, refs = [], []
    while len(cands) < pairs:
        a, b = rng.sample(range(len(pool)), 2)
        cands.append(pool[a])
        refs.append(pool[b])
    p, r, f = bert_score.score(
        cands, refs, model_type=model, num_layers=num_layers, all_layers=True, lang="en", batch_size=64, verbose=False
    )
    out = io.StringIO()
    out.write("LAYER,P,R,F\n")
    for layer in range(p.shape[0]):  # all_layers: one row of scores per layer
        out.write(f"{layer},{p[layer].mean():.6f},{r[layer].mean():.6f},{f[layer].mean():.6f}\n")
    return out.getvalue()


def resolve(path: str | None) -> str:
    """The baseline file to use: `path` as given, or the bundled one after its pin checks."""
    if path:
        if not os.path.isfile(path):
            raise InputError(f"bertscore.baseline_path: {path}: no such file")
        return path
    got = sha256_file(BUNDLED)
    if got != BUNDLED_SHA256:
        raise InputError(f"{BUNDLED}: SHA-256 {got} is not the pinned {BUNDLED_SHA256}")
    return BUNDLED


def layer_row(path: str, layer: int) -> tuple[float, float, float]:
    with open(path, encoding="utf-8") as handle:
        rows = {int(row["LAYER"]): row for row in csv.DictReader(handle)}
    if layer not in rows:
        raise InputError(f"bertscore.baseline_path: {path} has no row for layer {layer}")
    return tuple(float(rows[layer][k]) for k in ("P", "R", "F"))
