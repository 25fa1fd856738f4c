"""The exact-dedup index gives the answers of one SQLite statement a row, however it batches."""

import random

from kfp_llmops.components.data_validation.dedup import FingerprintIndex


def test_fingerprint_index_answers_as_one_statement_a_row(monkeypatch):
    """Keys waiting in memory, keys already written and Bloom false positives (a 2**10-bit
    filter fills at once) all give the first line, as a plain dict does."""
    monkeypatch.setattr(FingerprintIndex, "_FLUSH", 64)
    monkeypatch.setattr(FingerprintIndex, "_BLOOM_BITS", 10)
    rng = random.Random(5)
    index, first = FingerprintIndex(), {}
    try:
        for line in range(1, 5000):
            key = rng.getrandbits(64) if rng.random() < 0.7 else rng.choice(list(first) or [1])
            assert index.add(key, line) == first.get(key & 0x7FFF_FFFF_FFFF_FFFF)
            first.setdefault(key & 0x7FFF_FFFF_FFFF_FFFF, line)
    finally:
        index.close()
