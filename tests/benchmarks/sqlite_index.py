"""The exact-dedup index's storage before sorted runs, kept as the benchmark's baseline:
the same Bloom filter and waiting keys, flushed into a SQLite B-tree (8 MiB page cache)
and looked up one statement a key."""

from __future__ import annotations

import os
import sqlite3

import numpy as np

from kfp_llmops.components.data_validation.dedup import FingerprintIndex


class SqliteFingerprintIndex(FingerprintIndex):
    def __init__(self, tmp_dir: str | None = None, cache_kib: int = 8192):
        super().__init__(tmp_dir)
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

    def _find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lines, found = np.zeros(len(keys), dtype=np.int64), np.zeros(len(keys), dtype=bool)
        for j, key in enumerate(keys.tolist()):
            row = self._db.execute("SELECT line FROM fp WHERE k = ?", (key,)).fetchone()
            if row is not None:
                lines[j], found[j] = row[0], True
        return lines, found

    def _flush(self) -> None:
        """The waiting keys into the B-tree in key order (random order cost twice as much)."""
        keys, lines = self._drain()
        self._db.executemany("INSERT INTO fp VALUES (?, ?)", zip(keys.tolist(), lines.tolist(), strict=True))

    def close(self) -> None:
        self._db.close()
        super().close()
