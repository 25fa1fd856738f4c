"""The stage's outputs: where they go (`OutputPaths`), the clean and quarantine files of
one run (`Outputs`: written to temporary names, Merkle-hashed as written, and renamed at
`commit` both or neither), the result a run returns, and the JSON reports.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field
from typing import Any

import orjson

from kfp_llmops.components.common import atomic, integrity, merkle

CLEAN_NAME = integrity.DATASET_FILE


@dataclass
class OutputPaths:
    clean: str
    quarantine: str
    metrics: str | None = None
    stats: str | None = None

    @classmethod
    def in_dir(cls, out_dir: str) -> OutputPaths:
        os.makedirs(out_dir, exist_ok=True)
        j = lambda name: os.path.join(out_dir, name)  # noqa: E731
        return cls(j(CLEAN_NAME), j("quarantine.jsonl"), j("metrics.json"), j("stats.json"))


@dataclass
class ValidationResult:
    metrics: dict[str, Any]
    passed: bool
    gate_reasons: list[str] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)

    @property
    def root(self) -> str:
        return self.metrics["merkle_root"]


class Sink(atomic.AtomicFile):
    """An output file that appears on commit; optionally Merkle-hashed as written."""

    def __init__(self, path: str, hashed_chunk: int | None = None):
        super().__init__(path)
        self.hasher = merkle.MerkleWriter(hashed_chunk) if hashed_chunk else None
        self.bytes = 0

    def write(self, data: bytes) -> None:
        super().write(data)
        self.bytes += len(data)
        if self.hasher is not None:
            self.hasher.update(data)


class Outputs:
    """The clean and quarantine files of one run: written as rows are judged, and both
    appear at `commit` or neither does (an exception inside `with` drops both)."""

    def __init__(self, paths: OutputPaths, chunk_size: int):
        self.paths, self.chunk_size = paths, chunk_size
        self.clean = Sink(paths.clean, hashed_chunk=chunk_size)
        self.quarantine = Sink(paths.quarantine)

    def __enter__(self) -> Outputs:
        return self

    def __exit__(self, kind, value, tb) -> None:
        if kind is not None:
            self.clean.abort()
            self.quarantine.abort()

    def commit(self) -> str:
        """The clean file's dataset root, once both files are in place."""
        root = integrity.dataset_root(self.clean.hasher.finish(CLEAN_NAME), self.chunk_size)
        try:
            self.quarantine.commit()
            self.clean.commit()
        except BaseException:  # a full disk at the last flush: neither is left to look finished
            self.quarantine.abort()
            self.clean.abort()
            if os.path.exists(self.paths.quarantine) and not os.path.exists(self.paths.clean):
                os.unlink(self.paths.quarantine)
            raise
        return root


def write_json(path: str, data: dict) -> None:
    atomic.write_bytes(path, orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")


def raw_field(raw: bytes) -> dict:
    """A quarantined line's bytes as its entry holds them: text where they are UTF-8."""
    try:
        return {"raw": raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {"raw_b64": base64.b64encode(raw).decode("ascii")}
