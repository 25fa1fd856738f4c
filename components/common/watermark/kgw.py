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
from dataclasses import dataclass, field

import numpy as np

SCHEMES = ("lefthash", "selfhash")
_MASK64 = (1 << 64) - 1
_SELF_WIDTH = 4
_DENSE_VOCAB = 4096  # up to here the processor keeps a dense V x V bias table
_BUILD_ROWS = 256  # green lists unpacked at once while the packed table grows
TABLE_BYTES = 256 << 20  # bound of the packed green-list table (V/8 bytes a row)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: a fast, well-mixed 64-bit integer hash (vectorized)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class LeftHashGreenLists:
    """Green masks per previous token, from the reference construction, kept as a packed
    bit table (V/8 bytes per previous token seen) so membership is one vectorized gather.
    The table is bounded (`max_bytes`): when a call needs rows beyond it, the table is
    started afresh with just what that call needs, so a long-lived server at a large
    vocabulary stays within the bound and results never change."""

    def __init__(self, key: int, vocab_size: int, gamma: float, max_bytes: int = TABLE_BYTES):
        self.key, self.vocab_size, self.gamma = key, vocab_size, gamma
        self.size = int(vocab_size * gamma)
        self.max_rows = max(1, max_bytes // ((vocab_size + 7) // 8))
        self._row = np.full(vocab_size, -1, dtype=np.int64)  # previous token -> table row
        self._bits = np.zeros((0, (vocab_size + 7) // 8), dtype=np.uint8)

    def greenlist(self, prev: int):
        """The reference green list (token ids) for one previous token."""
        import torch

        gen = torch.Generator(device="cpu")
        gen.manual_seed((self.key * int(prev)) & _MASK64)
        return torch.randperm(self.vocab_size, generator=gen)[: self.size]

    def _ensure(self, prevs: np.ndarray) -> None:
        needed = np.zeros(self.vocab_size, dtype=bool)  # presence, no sort over all tokens
        needed[prevs] = True
        missing = np.flatnonzero(needed & (self._row < 0))
        if not len(missing):
            return
        if len(self._bits) + len(missing) > self.max_rows:  # over the bound: start afresh
            self._row[:] = -1
            self._bits = self._bits[:0]
            missing = np.flatnonzero(needed)
        packed = []
        for lo in range(0, len(missing), _BUILD_ROWS):  # a bounded block of unpacked rows at a time
            block = missing[lo : lo + _BUILD_ROWS]
            rows = np.zeros((len(block), self.vocab_size), dtype=bool)
            for i, prev in enumerate(block.tolist()):
                rows[i, self.greenlist(prev).numpy()] = True
            packed.append(np.packbits(rows, axis=1, bitorder="little"))
        self._row[missing] = np.arange(len(self._bits), len(self._bits) + len(missing))
        self._bits = np.concatenate([self._bits, *packed])

    def mask(self, prev: int) -> np.ndarray:
        self._ensure(np.array([prev], dtype=np.int64))
        return np.unpackbits(self._bits[self._row[prev]], bitorder="little")[: self.vocab_size].astype(bool)

    def is_green(self, prev: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        prev, tokens = np.asarray(prev, dtype=np.int64), np.asarray(tokens, dtype=np.int64)
        if not len(prev):
            return np.zeros(0, dtype=bool)
        self._ensure(prev)
        byte = self._bits[self._row[prev], tokens >> 3]
        return ((byte >> (tokens & 7).astype(np.uint8)) & 1).astype(bool)


class SelfHashGreen:
    def __init__(self, key: int, vocab_size: int, gamma: float):
        self.key, self.vocab_size, self.gamma = np.uint64(key), vocab_size, gamma
        self.threshold = np.uint64(min(_MASK64, int(gamma * 2**64)))

    def seeds(self, contexts: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """Anchored min-hash: min over context of H(key*t) * H(key*candidate) (wrapping)."""
        with np.errstate(over="ignore"):
            ctx = _mix64(contexts.astype(np.uint64) * self.key)
            anchor = _mix64(candidates.astype(np.uint64) * self.key)
            return (ctx * anchor[..., None]).min(axis=-1)

    def is_green(self, contexts: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return _mix64(self.seeds(contexts, tokens) ^ (tokens.astype(np.uint64) * self.key)) < self.threshold


def _gram_keys(tokens: np.ndarray, width: int) -> np.ndarray:
    """One 64-bit key per (context, token) n-gram (a hash; collisions are negligible)."""
    grams = np.lib.stride_tricks.sliding_window_view(tokens, width + 1).astype(np.uint64)
    acc = np.zeros(len(grams), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(width + 1):
            acc = _mix64(acc * np.uint64(0x100000001B3) ^ grams[:, j])
    return acc


def _pair_keys(prev: np.ndarray, tok: np.ndarray) -> np.ndarray:
    """The same keys as `_gram_keys` for width 1, for whole arrays at once."""
    with np.errstate(over="ignore"):
        acc = _mix64(np.zeros(len(prev), dtype=np.uint64) * np.uint64(0x100000001B3) ^ prev.astype(np.uint64))
        return _mix64(acc * np.uint64(0x100000001B3) ^ tok.astype(np.uint64))


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
    green_mask: list[bool] = field(default_factory=list)  # per token after the context; None if skipped

    def to_json(self, with_mask: bool = False) -> dict:
        out = {
            "z": self.z,
            "p_value": self.p_value,
            "tokens_scored": self.tokens_scored,
            "green": self.green,
            "green_fraction": self.green_fraction,
            "watermarked": self.watermarked,
        }
        if with_mask:
            out["green_mask"] = self.green_mask
        return out


def normal_sf(z: float) -> float:
    """Exact one-sided p-value, P(Z >= z), via erfc (no series approximation)."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


class Watermark:
    def __init__(
        self,
        key: int,
        vocab_size: int,
        scheme: str = "lefthash",
        gamma: float = 0.25,
        delta: float = 2.0,
        z_threshold: float = 4.0,
        min_tokens: int = 16,
        ignore_repeated: bool = True,
    ):
        if scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r}; choose from {SCHEMES}")
        self.key, self.vocab_size, self.scheme = key, vocab_size, scheme
        self.gamma, self.delta, self.z_threshold = gamma, delta, z_threshold
        self.min_tokens, self.ignore_repeated = min_tokens, ignore_repeated
        self.width = context_width(scheme)
        self.lefthash = LeftHashGreenLists(key, vocab_size, gamma) if scheme == "lefthash" else None
        self.selfhash = SelfHashGreen(key, vocab_size, gamma) if scheme == "selfhash" else None
        self._dense = None

    # -- detection ----------------------------------------------------------------------

    def green_flags(self, tokens: np.ndarray) -> np.ndarray:
        """Green or not for every token that has a full context (positions width..T-1)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        if len(tokens) <= self.width:
            return np.zeros(0, dtype=bool)
        if self.lefthash is not None:
            return self.lefthash.is_green(tokens[:-1], tokens[1:])
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:-1], self.width)
        return self.selfhash.is_green(windows, tokens[self.width :])

    def detect(self, tokens) -> Detection:
        return self.detect_many([tokens], with_mask=True)[0]

    def detect_many(self, texts, with_mask: bool = False) -> list[Detection]:
        """Score many tokenized texts at once: one gather for every green test, one sort
        to count each (context, token) n-gram once per text."""
        arrays = [np.asarray(t, dtype=np.int64) for t in texts]
        if self.lefthash is not None:
            prev = np.concatenate([a[:-1] for a in arrays if len(a) > 1] or [np.zeros(0, np.int64)])
            tok = np.concatenate([a[1:] for a in arrays if len(a) > 1] or [np.zeros(0, np.int64)])
            flags = self.lefthash.is_green(prev, tok)
            lengths = np.array([max(0, len(a) - 1) for a in arrays])
        else:
            parts = [self.green_flags(a) for a in arrays]
            flags = np.concatenate(parts or [np.zeros(0, bool)])
            lengths = np.array([len(p) for p in parts])
        text_id = np.repeat(np.arange(len(arrays)), lengths)
        keep = np.ones(len(flags), dtype=bool)
        if self.ignore_repeated and len(flags):
            # Count each (context, token) n-gram once per text: repeats carry no new evidence.
            if self.lefthash is not None:  # width 1: the pairs are already at hand
                grams = _pair_keys(prev, tok)
            else:
                grams = np.concatenate(
                    [_gram_keys(a, self.width) for a in arrays if len(a) > self.width] or [np.zeros(0, np.uint64)]
                )
            with np.errstate(over="ignore"):
                keyed = _mix64(grams ^ (text_id.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)))
            # Any member of a group may stand for it (repeats share their flag), so an
            # unstable sort does: 3-4x faster than np.unique's stable one on 1 M tokens.
            order = np.argsort(keyed)
            ranked = keyed[order]
            keep = np.zeros(len(flags), dtype=bool)
            keep[order[np.concatenate(([True], ranked[1:] != ranked[:-1]))]] = True
        t = np.bincount(text_id[keep], minlength=len(arrays))
        g = np.bincount(text_id[keep], weights=flags[keep], minlength=len(arrays)).astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        out = []
        for i in range(len(arrays)):
            mask = flags[offsets[i] : offsets[i + 1]].tolist() if with_mask else []
            ti, gi = int(t[i]), int(g[i])
            if ti < self.min_tokens:
                out.append(Detection(float("nan"), float("nan"), ti, gi, gi / ti if ti else float("nan"), False, mask))
                continue
            z = (gi - self.gamma * ti) / math.sqrt(ti * self.gamma * (1 - self.gamma))
            out.append(Detection(z, normal_sf(z), ti, gi, gi / ti, z >= self.z_threshold, mask))
        return out

    # -- generation ---------------------------------------------------------------------

    def bias(self, input_ids, scores):
        """Add delta to the green logits of each row (the LogitsProcessor's work)."""
        import torch

        v = self.vocab_size
        if self.lefthash is not None and v <= _DENSE_VOCAB:
            if self._dense is None:  # delta on every green list, one row per previous token (<= 64 MiB)
                self.lefthash._ensure(np.arange(v))
                bits = np.unpackbits(self.lefthash._bits[self.lefthash._row], axis=1, bitorder="little")[:, :v]
                self._dense = torch.from_numpy(bits.astype(np.float32) * self.delta)
            scores[:, :v] += self._dense.index_select(0, input_ids[:, -1].clamp(0, v - 1)).to(scores.dtype)
            return scores
        if self.lefthash is not None:
            # Large vocabularies: each row's green list unpacked from the packed table (V/8
            # bytes per previous token seen) at every step, never kept as V floats.
            prev = input_ids[:, -1].clamp(0, v - 1).numpy()
            self.lefthash._ensure(prev)
            bits = np.unpackbits(self.lefthash._bits[self.lefthash._row[prev]], axis=1, bitorder="little")[:, :v]
            scores[:, :v] += torch.from_numpy(bits).to(scores.dtype) * self.delta
            return scores
        # selfhash: each top-k candidate is salted with itself, so test the candidates.
        k = min(40, v)
        top = torch.topk(scores[:, :v], k, dim=-1).indices.numpy()
        ctx = input_ids[:, -self.width :].numpy()
        if ctx.shape[1] < self.width:
            return scores
        green = self.selfhash.is_green(np.repeat(ctx[:, None, :], k, axis=1), top)
        boost = torch.zeros_like(scores)
        boost.scatter_(
            1, torch.from_numpy(top), torch.from_numpy(green.astype(np.float32)).to(scores.dtype) * self.delta
        )
        return scores + boost


def logits_processor(watermark: Watermark):
    """A transformers LogitsProcessor applying `watermark` during generate()."""
    from transformers import LogitsProcessor

    class KGWLogitsProcessor(LogitsProcessor):
        def __call__(self, input_ids, scores):
            return watermark.bias(input_ids, scores)

    return KGWLogitsProcessor()
