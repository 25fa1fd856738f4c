"""The exact-dedup index gives the answers of a dict, however it batches, flushes and merges."""

import os
import random

import numpy as np

from kfp_llmops.components.data_validation.dedup import FingerprintIndex


def test_fingerprint_index_answers_as_a_dict(monkeypatch):
    """Keys waiting in memory, keys in runs of every level (16-key flushes, 5-key merge
    chunks) and Bloom false positives (a 2**10-bit filter fills at once) all give the
    first line, as a plain dict does; merged runs leave no file behind."""
    monkeypatch.setattr(FingerprintIndex, "_FLUSH", 16)
    monkeypatch.setattr(FingerprintIndex, "_BLOOM_BITS", 10)
    monkeypatch.setattr(FingerprintIndex, "_CHUNK", 5)
    rng = random.Random(5)
    index, first = FingerprintIndex(), {}
    try:
        for line in range(1, 5000):
            key = rng.getrandbits(64) if rng.random() < 0.7 else rng.choice(list(first) or [1])
            assert index.add(key, line) == first.get(key & 0x7FFF_FFFF_FFFF_FFFF)
            first.setdefault(key & 0x7FFF_FFFF_FFFF_FFFF, line)
        levels = [len(level) for level in index._levels]
        assert len(levels) >= 3 and levels[0] < FingerprintIndex._FANIN, levels
        assert len(os.listdir(index._dir)) == 2 * sum(levels)
        assert index.size == len(first)
    finally:
        index.close()
    assert not os.path.exists(index._dir)


def test_a_merged_run_is_sorted_and_holds_every_key_once(monkeypatch):
    """Merging runs whose keys interleave, a chunk of each at a time, keeps each key with
    its line, in key order."""
    monkeypatch.setattr(FingerprintIndex, "_FLUSH", 100)
    monkeypatch.setattr(FingerprintIndex, "_CHUNK", 7)
    rng = np.random.default_rng(3)
    keys = rng.choice(2**40, size=800, replace=False).astype(np.uint64)
    index = FingerprintIndex()
    try:
        for start in range(0, 800, 100):  # eight runs of 100, merged when the eighth is written
            assert not index.add_many(keys[start : start + 100], np.arange(start + 1, start + 101)).any()
        assert [len(level) for level in index._levels] == [0, 1]
        (run,) = index._levels[1]
        got = run.read(0, 0, len(run))
        assert np.all(np.diff(got) > 0) and sorted(got.tolist()) == sorted(keys.astype(np.int64).tolist())
        lines = run.read(1, 0, len(run))
        assert dict(zip(got.tolist(), lines.tolist(), strict=True)) == {
            int(k): i for i, k in enumerate(keys.tolist(), 1)
        }
    finally:
        index.close()
