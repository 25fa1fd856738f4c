"""Duplicate detection: exact (normalized text) and near-duplicate (MinHash + LSH).

The exact index stores 12 bytes per kept row in flat arrays (open addressing), not
Python objects, so memory stays small next to the input: ~12 MB per million rows.
"""
from __future__ import annotations

import re
import unicodedata
import zlib
from array import array

from blake3 import blake3

_WS = re.compile(r"\s+")


def normalize(text: str) -> str:
    """NFKC, case-folded, whitespace collapsed: 'Hello  World' == 'hello world'."""
    return _WS.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def fingerprint(normalized: str) -> int:
    return int.from_bytes(blake3(normalized.encode("utf-8")).digest(8), "little") or 1


class FingerprintIndex:
    """64-bit fingerprint -> first line number, linear probing in two flat arrays."""

    def __init__(self, capacity: int = 1 << 14):
        self._alloc(capacity)
        self.size = 0

    def _alloc(self, capacity: int) -> None:
        self._keys = array("Q", bytes(8 * capacity))
        self._lines = array("I", bytes(4 * capacity))
        self._mask = capacity - 1

    def add(self, key: int, line: int) -> int | None:
        """Insert `key`; return the line it was first seen at if it was already there."""
        keys, mask = self._keys, self._mask
        i = key & mask
        while True:
            found = keys[i]
            if found == 0:
                keys[i] = key
                self._lines[i] = min(line, 0xFFFFFFFF)
                self.size += 1
                if self.size * 3 > (mask + 1) * 2:
                    self._grow()
                return None
            if found == key:
                return self._lines[i]
            i = (i + 1) & mask

    def _grow(self) -> None:
        old_keys, old_lines = self._keys, self._lines
        self._alloc(2 * len(old_keys))
        keys, lines, mask = self._keys, self._lines, self._mask
        for key, line in zip(old_keys, old_lines):
            if key:
                i = key & mask
                while keys[i]:
                    i = (i + 1) & mask
                keys[i], lines[i] = key, line


class NearDuplicateIndex:
    """MinHash signatures over word shingles, banded LSH, and an estimated-Jaccard check
    on every candidate so a bucket collision alone never rejects a row."""

    _PRIME = (1 << 31) - 1

    def __init__(self, threshold: float = 0.85, num_perm: int = 64, shingle_words: int = 3,
                 seed: int = 1):
        import numpy as np

        self._np = np
        rng = np.random.default_rng(seed)
        self.threshold, self.shingle_words = threshold, shingle_words
        self._a = rng.integers(1, self._PRIME, size=(num_perm, 1), dtype=np.uint64)
        self._b = rng.integers(0, self._PRIME, size=(num_perm, 1), dtype=np.uint64)
        self.bands, self.rows = _lsh_params(threshold, num_perm)
        self._buckets: dict[bytes, int] = {}
        self._signatures: list = []
        self._lines: list[int] = []

    def signature(self, normalized: str):
        np = self._np
        words = normalized.split(" ")
        k = self.shingle_words
        shingles = {" ".join(words[i:i + k]) for i in range(max(1, len(words) - k + 1))}
        x = np.fromiter((zlib.crc32(s.encode("utf-8")) for s in shingles), dtype=np.uint64,
                        count=len(shingles)) % np.uint64(self._PRIME)
        return ((self._a * x + self._b) % np.uint64(self._PRIME)).min(axis=1).astype(np.uint32)

    def query(self, sig) -> int | None:
        """Line of an indexed row whose estimated Jaccard with `sig` reaches the threshold."""
        for key in self._band_keys(sig):
            idx = self._buckets.get(key)
            if idx is not None and float((self._signatures[idx] == sig).mean()) >= self.threshold:
                return self._lines[idx]
        return None

    def add(self, sig, line: int) -> None:
        idx = len(self._signatures)
        self._signatures.append(sig)
        self._lines.append(line)
        for key in self._band_keys(sig):
            self._buckets.setdefault(key, idx)

    def _band_keys(self, sig):
        r = self.rows
        return [bytes([b]) + sig[b * r:(b + 1) * r].tobytes() for b in range(self.bands)]


def _lsh_params(threshold: float, num_perm: int) -> tuple[int, int]:
    """Bands x rows whose S-curve midpoint (1/b)^(1/r) sits closest to the threshold."""
    best = None
    for rows in range(1, num_perm + 1):
        if num_perm % rows:
            continue
        bands = num_perm // rows
        err = abs((1.0 / bands) ** (1.0 / rows) - threshold)
        if best is None or err < best[0]:
            best = (err, bands, rows)
    return best[1], best[2]
