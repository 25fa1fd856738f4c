"""Duplicate detection: exact (normalized text) and near-duplicate (MinHash + LSH).

The exact index lives in a temporary SQLite table with a capped page cache, so memory
stays flat in the input size; the MinHash index (off by default) is in memory.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import unicodedata
import zlib
from hashlib import blake2b

import numpy as np
from blake3 import blake3

_MASK63 = 0x7FFF_FFFF_FFFF_FFFF  # numpy-friendly keys


def normalize(text: str) -> str:
    """NFKC, case-folded, whitespace collapsed: 'Hello  World' == 'hello world'."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    text = text.casefold()
    # Printable text holds no whitespace but U+0020; without doubled, leading or trailing
    # ones it is collapsed already (most text: the split and join cost more than this).
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text
    return " ".join(text.split())


def _digest(normalized: str) -> bytes:
    """8 bytes of BLAKE2b from hashlib: half BLAKE3's cost a call at this size, and a key
    is only ever compared within one run."""
    return blake2b(normalized.encode("utf-8"), digest_size=8).digest()


def fingerprint(normalized: str) -> int:
    """A 64-bit key of a normalized text (never 0)."""
    return int.from_bytes(_digest(normalized), "little") or 1


def fingerprints(texts: list[str]) -> np.ndarray:
    """`fingerprint` of each text, as one uint64 array."""
    keys = np.frombuffer(b"".join(map(_digest, texts)), dtype="<u8").copy()
    keys[keys == 0] = 1
    return keys


class FingerprintIndex:
    """64-bit fingerprint -> first line number, in a temporary SQLite B-tree.

    Its page cache is capped (8 MiB), so the validator's memory stays flat however many
    rows pass through; the pages live in the OS file cache or on disk. One statement a
    row was most of dedup's cost, so new keys wait in a dict and go in together, and a
    fixed-size Bloom filter of every key added (two bits of a 32 MiB array, also flat)
    says which keys cannot be there, so only the rest are looked up. The answers are the
    same as one statement a row: the first line a key was seen at.
    """

    _BLOOM_BITS = 28  # 2**28 bits: 32 MiB
    _FLUSH = 65536

    def __init__(self, tmp_dir: str | None = None, cache_kib: int = 8192):
        self._dir = tempfile.mkdtemp(prefix="llmops-dedup-", dir=tmp_dir)
        self._db = sqlite3.connect(os.path.join(self._dir, "fingerprints.db"), isolation_level=None)
        for pragma in (
            "journal_mode=OFF",
            "synchronous=OFF",
            f"cache_size=-{cache_kib}",
            "temp_store=FILE",
            "locking_mode=EXCLUSIVE",
        ):
            self._db.execute(f"PRAGMA {pragma}")
        self._db.execute("CREATE TABLE fp(k INTEGER PRIMARY KEY, line INTEGER) WITHOUT ROWID")
        self._db.execute("BEGIN")
        self._bloom = bytearray(1 << (self._BLOOM_BITS - 3))
        self._pending: dict[int, int] = {}
        self.size = 0

    def add(self, key: int, line: int) -> int | None:
        """Insert `key`; return the line it was first seen at if it was already there."""
        key &= 0x7FFF_FFFF_FFFF_FFFF  # SQLite integers are signed 64-bit
        first = self._pending.get(key)
        if first is not None:
            return first
        bloom, mask = self._bloom, (1 << self._BLOOM_BITS) - 1
        a, b = key & mask, (key >> 32) & mask
        if bloom[a >> 3] >> (a & 7) & bloom[b >> 3] >> (b & 7) & 1:
            row = self._db.execute("SELECT line FROM fp WHERE k = ?", (key,)).fetchone()
            if row is not None:
                return row[0]
        bloom[a >> 3] |= 1 << (a & 7)
        bloom[b >> 3] |= 1 << (b & 7)
        self._pending[key] = line
        self.size += 1
        if len(self._pending) >= self._FLUSH:
            self._flush()
        return None

    def add_many(self, keys: np.ndarray, lines: np.ndarray) -> np.ndarray:
        """`add` of each key (uint64) with its line, in order, in one go: per key the line
        it was first seen at, or 0 where this is that line. Within the batch the first
        occurrence wins (np.unique's first index); only keys the Bloom filter cannot
        rule out are looked up one by one."""
        keys = keys & np.uint64(_MASK63)
        unique, first_at, inverse = np.unique(keys, return_index=True, return_inverse=True)
        first_line = lines[first_at].astype(np.int64)
        known = np.zeros(len(unique), dtype=bool)
        mask = np.uint64((1 << self._BLOOM_BITS) - 1)
        a = (unique & mask).astype(np.int64)
        b = ((unique >> np.uint64(32)) & mask).astype(np.int64)
        bloom = np.frombuffer(self._bloom, dtype=np.uint8)
        maybe = (bloom[a >> 3] >> (a & 7)) & (bloom[b >> 3] >> (b & 7)) & 1
        for j in np.flatnonzero(maybe).tolist():
            key = int(unique[j])
            first = self._pending.get(key)
            if first is None:
                row = self._db.execute("SELECT line FROM fp WHERE k = ?", (key,)).fetchone()
                first = None if row is None else row[0]
            if first is not None:
                first_line[j], known[j] = first, True
        new = ~known
        for bits in (a[new], b[new]):
            np.bitwise_or.at(bloom, bits >> 3, np.left_shift(1, bits & 7).astype(np.uint8))
        self._pending.update(zip(unique[new].tolist(), first_line[new].tolist(), strict=True))
        self.size += int(new.sum())
        if len(self._pending) >= self._FLUSH:
            self._flush()
        firsts = first_line[inverse.reshape(-1)]
        firsts[first_at[new]] = 0
        return firsts

    def _flush(self) -> None:
        """The new keys into the B-tree in key order: once the tree outgrows its page
        cache, random keys cost over twice as much (1.6 M keys: 6.4-6.7 s against 2.8)."""
        n = len(self._pending)
        keys = np.fromiter(self._pending.keys(), dtype=np.int64, count=n)
        lines = np.fromiter(self._pending.values(), dtype=np.int64, count=n)
        order = np.argsort(keys)
        self._db.executemany(
            "INSERT INTO fp VALUES (?, ?)", zip(keys[order].tolist(), lines[order].tolist(), strict=True)
        )
        self._pending.clear()

    def close(self) -> None:
        self._db.close()
        shutil.rmtree(self._dir, ignore_errors=True)


class NearDuplicateIndex:
    """MinHash signatures over word shingles, banded LSH, and an estimated-Jaccard check
    on every candidate so a bucket collision alone never rejects a row."""

    _PRIME = (1 << 31) - 1

    def __init__(self, threshold: float = 0.85, num_perm: int = 64, shingle_words: int = 3, seed: int = 1):
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
        shingles = {" ".join(words[i : i + k]) for i in range(max(1, len(words) - k + 1))}
        x = np.fromiter(
            (zlib.crc32(s.encode("utf-8")) for s in shingles), dtype=np.uint64, count=len(shingles)
        ) % np.uint64(self._PRIME)
        return ((self._a * x + self._b) % np.uint64(self._PRIME)).min(axis=1).astype(np.uint32)

    def query(self, sig) -> int | None:
        """Line of an indexed row whose estimated Jaccard with `sig` reaches the threshold."""
        for key in self._band_keys(sig):
            idx = self._buckets.get(key)
            if idx is not None and float((self._signatures[idx] == sig).mean()) >= self.threshold:
                return self._lines[idx]
        return None

    def check(self, text: str, line: int) -> int | None:
        """The line `text` is a near duplicate of, or None, having indexed it."""
        return self.check_signature(self.signature(text), line)

    def check_signature(self, sig, line: int) -> int | None:
        """`check` for a row whose signature is already known (the sharded engine's driver)."""
        first = self.query(sig)
        if first is None:
            self.add(sig, line)
        return first

    def add(self, sig, line: int) -> None:
        idx = len(self._signatures)
        self._signatures.append(sig)
        self._lines.append(line)
        for key in self._band_keys(sig):
            self._buckets.setdefault(key, idx)

    def _band_keys(self, sig):
        r = self.rows
        return [bytes([b]) + sig[b * r : (b + 1) * r].tobytes() for b in range(self.bands)]

    def band_hashes(self, sig) -> list[int]:
        """64-bit hashes of the band keys: rows that share none can never be near duplicates
        of each other (the sharded engine groups rows by them)."""
        return [int.from_bytes(blake3(key).digest(8), "little") & _MASK63 for key in self._band_keys(sig)]


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
