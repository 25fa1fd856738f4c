"""KGW text watermark (Kirchenbauer et al.): a green list of gamma * V tokens chosen by a
secret key and the context, delta added to their logits during generation, and a
one-proportion z-test at detection.

Schemes:
- `lefthash`: the green list depends on the previous token only, built exactly like
  lm-watermarking's `simple_1` (a CPU torch generator seeded with key x previous token,
  `randperm` of the vocabulary, the first floor(gamma * V) are green). Detection caches
  one green mask per previous token, so it never builds a permutation per token.
- `selfhash`: the authors' recommended shape (anchored min-hash over the 4 previous
  tokens, salted with the candidate token itself). Green membership is a keyed 64-bit
  hash of (seed, token) below gamma * 2^64 instead of a permutation, so generation and
  detection agree exactly and detection is O(1) per token; it is not bit-compatible
  with lm-watermarking's selfhash.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

SCHEMES = ("lefthash", "selfhash")
_MASK64 = (1 << 64) - 1
_SELF_WIDTH = 4


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: a fast, well-mixed 64-bit integer hash (vectorized)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class LeftHashGreenLists:
    """Green masks per previous token, from the reference construction, LRU-cached."""

    def __init__(self, key: int, vocab_size: int, gamma: float, cache_tokens: int = 4096):
        self.key, self.vocab_size, self.gamma = key, vocab_size, gamma
        self.size = int(vocab_size * gamma)
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._limit = cache_tokens

    def greenlist(self, prev: int):
        """The reference green list (token ids) for one previous token."""
        import torch
        gen = torch.Generator(device="cpu")
        gen.manual_seed((self.key * int(prev)) & _MASK64)
        return torch.randperm(self.vocab_size, generator=gen)[: self.size]

    def mask(self, prev: int) -> np.ndarray:
        prev = int(prev)
        found = self._cache.get(prev)
        if found is not None:
            self._cache.move_to_end(prev)
            return found
        m = np.zeros(self.vocab_size, dtype=bool)
        m[self.greenlist(prev).numpy()] = True
        self._cache[prev] = m
        if len(self._cache) > self._limit:
            self._cache.popitem(last=False)
        return m

    def is_green(self, prev: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        out = np.zeros(len(tokens), dtype=bool)
        for p in np.unique(prev):
            sel = prev == p
            out[sel] = self.mask(int(p))[tokens[sel]]
        return out


class SelfHashGreen:
    def __init__(self, key: int, vocab_size: int, gamma: float):
        self.key, self.vocab_size, self.gamma = np.uint64(key), vocab_size, gamma
        self.threshold = np.uint64(min(_MASK64, int(gamma * 2 ** 64)))

    def seeds(self, contexts: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """Anchored min-hash: min over context of H(key*t) * H(key*candidate) (wrapping)."""
        with np.errstate(over="ignore"):
            ctx = _mix64(contexts.astype(np.uint64) * self.key)
            anchor = _mix64(candidates.astype(np.uint64) * self.key)
            return (ctx * anchor[..., None]).min(axis=-1)

    def is_green(self, contexts: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return _mix64(self.seeds(contexts, tokens) ^ (tokens.astype(np.uint64) * self.key)) < self.threshold


def context_width(scheme: str) -> int:
    return 1 if scheme == "lefthash" else _SELF_WIDTH


@dataclass
class Detection:
    z: float
    p_value: float
    tokens_scored: int
    green: int
    green_fraction: float
    watermarked: bool
    green_mask: list[bool] = field(default_factory=list)   # per token after the context; None if skipped

    def to_json(self, with_mask: bool = False) -> dict:
        out = {"z": self.z, "p_value": self.p_value, "tokens_scored": self.tokens_scored, "green": self.green,
               "green_fraction": self.green_fraction, "watermarked": self.watermarked}
        if with_mask:
            out["green_mask"] = self.green_mask
        return out


def normal_sf(z: float) -> float:
    """Exact one-sided p-value, P(Z >= z), via erfc (no series approximation)."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


class Watermark:
    def __init__(self, key: int, vocab_size: int, scheme: str = "lefthash", gamma: float = 0.25,
                 delta: float = 2.0, z_threshold: float = 4.0, min_tokens: int = 16, ignore_repeated: bool = True):
        if scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r}; choose from {SCHEMES}")
        self.key, self.vocab_size, self.scheme = key, vocab_size, scheme
        self.gamma, self.delta, self.z_threshold = gamma, delta, z_threshold
        self.min_tokens, self.ignore_repeated = min_tokens, ignore_repeated
        self.width = context_width(scheme)
        self.lefthash = LeftHashGreenLists(key, vocab_size, gamma) if scheme == "lefthash" else None
        self.selfhash = SelfHashGreen(key, vocab_size, gamma) if scheme == "selfhash" else None

    # -- detection ----------------------------------------------------------------------

    def green_flags(self, tokens: np.ndarray) -> np.ndarray:
        """Green or not for every token that has a full context (positions width..T-1)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        if len(tokens) <= self.width:
            return np.zeros(0, dtype=bool)
        if self.lefthash is not None:
            return self.lefthash.is_green(tokens[:-1], tokens[1:])
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:-1], self.width)
        return self.selfhash.is_green(windows, tokens[self.width:])

    def detect(self, tokens) -> Detection:
        tokens = np.asarray(tokens, dtype=np.int64)
        flags = self.green_flags(tokens)
        scored = flags
        if self.ignore_repeated and len(flags):
            # Count each (context, token) n-gram once: repeats carry no new evidence.
            grams = np.lib.stride_tricks.sliding_window_view(tokens, self.width + 1)
            _, first = np.unique(grams, axis=0, return_index=True)
            scored = flags[np.sort(first)]
        t, g = len(scored), int(scored.sum())
        if t < self.min_tokens:
            return Detection(float("nan"), float("nan"), t, g, g / t if t else float("nan"), False, flags.tolist())
        z = (g - self.gamma * t) / math.sqrt(t * self.gamma * (1 - self.gamma))
        return Detection(z, normal_sf(z), t, g, g / t, z >= self.z_threshold, flags.tolist())

    # -- generation ---------------------------------------------------------------------

    def bias(self, input_ids, scores):
        """Add delta to the green logits of each row (the LogitsProcessor's work)."""
        import torch
        v = self.vocab_size
        if self.lefthash is not None:
            rows = [torch.from_numpy(self.lefthash.mask(int(prev))) for prev in input_ids[:, -1].tolist()]
            mask = torch.stack(rows)
            scores[:, :v] = scores[:, :v] + self.delta * mask.to(scores.dtype)
            return scores
        # selfhash: each top-k candidate is salted with itself, so test the candidates.
        k = min(40, v)
        top = torch.topk(scores[:, :v], k, dim=-1).indices.numpy()
        ctx = input_ids[:, -self.width:].numpy()
        if ctx.shape[1] < self.width:
            return scores
        green = self.selfhash.is_green(np.repeat(ctx[:, None, :], k, axis=1), top)
        boost = torch.zeros_like(scores)
        boost.scatter_(1, torch.from_numpy(top), torch.from_numpy(green.astype(np.float32)).to(scores.dtype) * self.delta)
        return scores + boost


def logits_processor(watermark: Watermark):
    """A transformers LogitsProcessor applying `watermark` during generate()."""
    from transformers import LogitsProcessor

    class KGWLogitsProcessor(LogitsProcessor):
        def __call__(self, input_ids, scores):
            return watermark.bias(input_ids, scores)

    return KGWLogitsProcessor()
