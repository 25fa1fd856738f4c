"""Duplicate detection: exact (normalized text) and near-duplicate (MinHash + LSH).

The exact index keeps its keys in sorted runs on disk, so memory stays flat in the input
size; the MinHash index (off by default) is in memory.
"""

from __future__ import annotations

import mmap
import os
import shutil
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
    """64-bit fingerprint -> first line number: new keys in memory, the rest in sorted
    runs on disk, merged as they pile up (a log-structured merge tree).

    Memory stays flat however many rows pass through: a fixed-size Bloom filter of every
    key added (two bits of a 32 MiB array) says which keys cannot be there, up to
    `_FLUSH` new keys wait in memory (`add`'s in a dict, each `add_many`'s as one sorted
    array: no Python object a key), and the runs are files read through the OS file
    cache, only where a lookup lands. A flush writes the waiting keys as one sorted run;
    `_FANIN` runs of a level are merged into one of the next, a chunk at a time. A key is
    in one place only (it is added once), so a lookup stops at the first hit. The answers
    are those of a dict: the first line a key was seen at. One SQLite statement a key
    (the index before this) cost about a microsecond a key; writing a run costs tens of
    nanoseconds.
    """

    _BLOOM_BITS = 28  # 2**28 bits: 32 MiB
    _FLUSH = 65536
    _FANIN = 8  # runs of a level merged into one of the next
    _CHUNK = 16384  # keys read from each run at a time while merging
    _BATCH = 1024  # an add_many adding fewer new keys puts them in the dict

    def __init__(self, tmp_dir: str | None = None):
        self._dir = tempfile.mkdtemp(prefix="llmops-dedup-", dir=tmp_dir)
        self._bloom = bytearray(1 << (self._BLOOM_BITS - 3))
        self._pending: dict[int, int] = {}
        self._batches: list[tuple[np.ndarray, np.ndarray]] = []  # add_many's new keys (sorted), lines
        self._batched = 0
        self._levels: list[list[_Run]] = []
        self._written = 0  # runs written so far: their file names
        self.size = 0

    def add(self, key: int, line: int) -> int | None:
        """Insert `key`; return the line it was first seen at if it was already there."""
        key &= _MASK63
        first = self._pending.get(key)
        if first is not None:
            return first
        bloom, mask = self._bloom, (1 << self._BLOOM_BITS) - 1
        a, b = key & mask, (key >> 32) & mask
        if bloom[a >> 3] >> (a & 7) & bloom[b >> 3] >> (b & 7) & 1:
            found, hit = self._lookup(np.array([key], dtype=np.int64))
            if hit[0]:
                return int(found[0])
        bloom[a >> 3] |= 1 << (a & 7)
        bloom[b >> 3] |= 1 << (b & 7)
        self._pending[key] = line
        self.size += 1
        if len(self._pending) + self._batched >= self._FLUSH:
            self._flush()
        return None

    def add_many(self, keys: np.ndarray, lines: np.ndarray) -> np.ndarray:
        """`add` of each key (uint64) with its line, in order, in one go: per key the line
        it was first seen at, or 0 where this is that line. Within the batch the first
        occurrence wins (np.unique's first index); only keys the Bloom filter cannot
        rule out are looked up, in the waiting dict and then in each run at once."""
        keys = keys & np.uint64(_MASK63)
        unique, first_at, inverse = np.unique(keys, return_index=True, return_inverse=True)
        first_line = lines[first_at].astype(np.int64)
        known = np.zeros(len(unique), dtype=bool)
        mask = np.uint64((1 << self._BLOOM_BITS) - 1)
        a = (unique & mask).astype(np.int64)
        b = ((unique >> np.uint64(32)) & mask).astype(np.int64)
        bloom = np.frombuffer(self._bloom, dtype=np.uint8)
        maybe = np.flatnonzero((bloom[a >> 3] >> (a & 7)) & (bloom[b >> 3] >> (b & 7)) & 1)
        if len(maybe):
            pending = self._pending
            left = []
            for j in maybe.tolist():
                first = pending.get(int(unique[j])) if pending else None
                if first is None:
                    left.append(j)
                else:
                    first_line[j], known[j] = first, True
            at = np.array(left, dtype=np.int64)
            if len(at):
                found, hit = self._lookup(unique[at].astype(np.int64))
                first_line[at[hit]], known[at[hit]] = found[hit], True
        new = ~known
        for bits in (a[new], b[new]):
            np.bitwise_or.at(bloom, bits >> 3, np.left_shift(1, bits & 7).astype(np.uint8))
        added = int(new.sum())
        if added >= self._BATCH:
            self._batches.append((unique[new].astype(np.int64), first_line[new]))  # np.unique sorted them
            self._batched += added
        elif added:  # a few keys: the dict (at most _FLUSH / _BATCH arrays to search)
            self._pending.update(zip(unique[new].tolist(), first_line[new].tolist(), strict=True))
        self.size += added
        if len(self._pending) + self._batched >= self._FLUSH:
            self._flush()
        firsts = first_line[inverse.reshape(-1)]
        firsts[first_at[new]] = 0
        return firsts

    def _runs(self):
        """Every run, newest level first."""
        for level in self._levels:
            yield from level

    def _lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lines, found) of `keys` (int64) among add_many's waiting keys, then `_find`."""
        lines, found = np.zeros(len(keys), dtype=np.int64), np.zeros(len(keys), dtype=bool)
        left = np.arange(len(keys))
        for batch, batch_lines in self._batches:
            if not len(left):
                break
            at = np.minimum(np.searchsorted(batch, keys[left]), len(batch) - 1)
            hit = batch[at] == keys[left]
            lines[left[hit]], found[left[hit]] = batch_lines[at[hit]], True
            left = left[~hit]
        if len(left):
            got, hit = self._find(keys[left])
            lines[left[hit]], found[left[hit]] = got[hit], True
        return lines, found

    def _find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lines, found) of `keys` (int64) in the runs."""
        lines, found = np.zeros(len(keys), dtype=np.int64), np.zeros(len(keys), dtype=bool)
        left = np.arange(len(keys))
        for run in self._runs():
            if not len(left):
                break
            got, hit = run.lookup(keys[left])
            lines[left[hit]], found[left[hit]] = got[hit], True
            left = left[~hit]
        return lines, found

    def _drain(self) -> tuple[np.ndarray, np.ndarray]:
        """The waiting keys and their lines in key order, none left waiting."""
        n = len(self._pending)
        keys = np.fromiter(self._pending.keys(), dtype=np.int64, count=n)
        lines = np.fromiter(self._pending.values(), dtype=np.int64, count=n)
        keys = np.concatenate([keys, *(k for k, _ in self._batches)])
        lines = np.concatenate([lines, *(v for _, v in self._batches)])
        order = np.argsort(keys)
        self._pending.clear()
        self._batches, self._batched = [], 0
        return keys[order], lines[order]

    def _flush(self) -> None:
        """The waiting keys as one sorted run; a full level merged into the next."""
        run = self._new_run()
        run.append(*self._drain())
        self._add_run(0, run.close())

    def _add_run(self, level: int, run: _Run) -> None:
        while len(self._levels) <= level:
            self._levels.append([])
        self._levels[level].append(run)
        if len(self._levels[level]) >= self._FANIN:
            merged = self._merge(self._levels[level])
            self._levels[level] = []
            self._add_run(level + 1, merged)

    def _new_run(self) -> _Run:
        self._written += 1
        return _Run(os.path.join(self._dir, f"run-{self._written}"))

    def _merge(self, runs: list[_Run]) -> _Run:
        """One sorted run of `runs`, reading `_CHUNK` keys of each at a time: memory
        stays a few MiB whatever the runs' size."""
        out = self._new_run()
        at = [0] * len(runs)
        while True:
            chunks = [
                r.read(0, i, min(self._CHUNK, len(r) - i)) if i < len(r) else None
                for r, i in zip(runs, at, strict=True)
            ]
            if all(c is None for c in chunks):
                break
            # Every key up to the smallest last key of a partial chunk is in the chunks.
            partial = [
                int(c[-1]) for c, r, i in zip(chunks, runs, at, strict=True) if c is not None and i + len(c) < len(r)
            ]
            limit = min(partial, default=None)
            keys, lines = [], []
            for n, (r, chunk) in enumerate(zip(runs, chunks, strict=True)):
                if chunk is None:
                    continue
                take = len(chunk) if limit is None else int(np.searchsorted(chunk, limit, side="right"))
                keys.append(chunk[:take])
                lines.append(r.read(1, at[n], take))
                at[n] += take
            keys_, lines_ = np.concatenate(keys), np.concatenate(lines)
            order = np.argsort(keys_, kind="stable")
            out.append(keys_[order], lines_[order])
        for r in runs:
            r.delete()
        return out.close()

    def close(self) -> None:
        for run in self._runs():
            run.release()
        self._levels = []
        shutil.rmtree(self._dir, ignore_errors=True)


class _Run:
    """One sorted run: its keys and their lines, two int64 files. Lookups read the keys
    through mmap and then drop the pages they touched from the process (the OS file
    cache keeps them), merges read chunks with pread: neither grows the process."""

    def __init__(self, path: str):
        self.path = path
        self._out = [open(path + ".keys", "wb"), open(path + ".lines", "wb")]  # noqa: SIM115 (closed by close)
        self.n = 0

    def append(self, keys: np.ndarray, lines: np.ndarray) -> None:
        self._out[0].write(keys.tobytes())
        self._out[1].write(lines.tobytes())
        self.n += len(keys)

    def close(self) -> _Run:
        """Done writing: open for reading."""
        for f in self._out:
            f.close()
        self._fds = [os.open(self.path + suffix, os.O_RDONLY) for suffix in (".keys", ".lines")]
        self._map = mmap.mmap(self._fds[0], 0, access=mmap.ACCESS_READ)
        self.keys = np.frombuffer(self._map, dtype=np.int64)
        return self

    def __len__(self) -> int:
        return self.n

    def read(self, which: int, start: int, count: int) -> np.ndarray:
        """`count` keys (`which` 0) or lines (1) from `start`."""
        return np.frombuffer(os.pread(self._fds[which], 8 * count, 8 * start), dtype=np.int64)

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lines, hit) for `keys`: where hit, the line the key was added with."""
        at = np.minimum(np.searchsorted(self.keys, keys), self.n - 1)
        hit = self.keys[at] == keys
        # Dropped at once: the kernel maps 16 pages around each one a search touches.
        self._map.madvise(mmap.MADV_DONTNEED)
        lines = np.zeros(len(keys), dtype=np.int64)
        for j in np.flatnonzero(hit).tolist():
            lines[j] = self.read(1, int(at[j]), 1)[0]
        return lines, hit

    def release(self) -> None:
        self.keys = None
        self._map.close()
        for fd in self._fds:
            os.close(fd)

    def delete(self) -> None:
        self.release()
        for suffix in (".keys", ".lines"):
            os.unlink(self.path + suffix)


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
