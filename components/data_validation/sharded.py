"""validate_dataset over byte-range shards, with the outputs of one process for any
number of shards or workers.

Three passes, each a function of one shard or one partition, so Ray (ray_engine.py) or
a plain loop can run them:

1. `shard_keys`: each shard parses its lines and emits the exact-dedup key of every
   row that passes the schema, with the row's position (shard << 40 | line in shard),
   hash-partitioned by key; it also counts its lines. With near-dup on, it also keeps
   each such row's MinHash signature and emits the hashes of its LSH band keys,
   partitioned likewise.
2. `first_occurrences`: each partition finds, per key, the row at the smallest position:
   every other row with that key is a duplicate of it. This is the single process's
   rule (the first occurrence in the file wins), so the tie-break is the input position.
   With near-dup on, `band_collisions` finds, per partition, the rows that share a band
   with another row: only they can be near duplicates or what one is similar to. The
   driver runs the single process's index over just those rows (their signatures
   fetched from pass 1) in input order, so the same rows are kept and each duplicate
   cites the same line.
3. `validate_shard`: each shard runs the single-process validator on its own lines,
   numbered from its first global line, with dedup indexes that answer from pass 2;
   its clean and quarantine bytes come back whole and are written in shard order.

The clean file is hashed as it is written, so its Merkle root is the single process's.
Counters and PSI statistics are sums. Each shard hashes the bytes it read in passes 1
and 3: an input that changed in between is refused, not validated half old, half new.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from blake3 import blake3

from kfp_llmops.components.common.errors import InputError

from .blocks import Validator
from .config import DataValidationConfig
from .gate import Totals, finish
from .outputs import Outputs
from .pii_scan import name_finder
from .reader import Inputs, Lines, input_files, open_input, rest_of_line, whole_lines
from .stream import fill_blocks, long_lived_frozen, stream

SHIFT = 40  # a row's position: its shard << SHIFT | its line in the shard
_LOW = (1 << SHIFT) - 1
_KEY_MASK = 0x7FFF_FFFF_FFFF_FFFF  # as the single process's index keeps keys
DRILL_KILL = "LLMOPS_DRILL_KILL_SHARD"  # "<shard>:<marker file>": the first try of that shard dies


@dataclass(frozen=True)
class Shard:
    index: int  # over all the input's files, in their order
    start: int
    end: int  # -1: the whole stream (gzip cannot be split)
    path: str  # its file


def plan(path: str, shard_bytes: int) -> tuple[list[Shard], Inputs]:
    """Shards of about `shard_bytes` that start at line starts (a line longer than a
    shard stays whole in one) over each of the input's files in order, and the input."""
    inputs = input_files(path)
    shards: list[Shard] = []
    for file in inputs.files:
        for start, end in _ranges(file, shard_bytes):
            shards.append(Shard(len(shards), start, end, file))
    return shards, inputs


def _ranges(path: str, shard_bytes: int) -> list[tuple[int, int]]:
    src = open_input(path)  # refuses what cannot be data, as the single process does
    src.close()
    if src.compressed:
        return [(0, -1)]
    starts = [0]
    with open(path, "rb") as handle:
        nominal = shard_bytes
        while nominal < src.size:
            handle.seek(nominal - 1)
            pos = nominal - 1
            while True:
                piece = handle.read(1 << 20)
                if not piece:
                    pos = src.size
                    break
                newline = piece.find(b"\n")
                if newline >= 0:
                    pos += newline + 1
                    break
                pos += len(piece)
            if pos >= src.size:
                break
            starts.append(pos)
            nominal = pos + shard_bytes
    return list(zip(starts, starts[1:] + [src.size], strict=False))


class _Range:
    """A shard's bytes through `readline`, `peek` and `read` (the reader `stream.stream`
    wants), never past the shard's end, hashed as read."""

    def __init__(self, shard: Shard):
        self.path, self.shard = shard.path, shard
        self.digest = blake3()
        if shard.end < 0:
            self._src = open_input(self.path)
            self._buffered, self.left = self._src.reader, None
            self.size = self._src.size
        else:
            self._src = open(self.path, "rb", buffering=1 << 20)
            self._src.seek(shard.start)
            self._buffered, self.left = self._src, shard.end - shard.start
            self.size = self.left
        self.reader = self

    def readline(self, limit: int) -> bytes:
        if self.left is None:
            line = self._buffered.readline(limit)
        else:
            if self.left <= 0:
                return b""
            line = self._buffered.readline(min(limit, self.left))
            self.left -= len(line)
        self.digest.update(line)
        return line

    def peek(self) -> bytes:
        data = self._buffered.peek()
        return data if self.left is None else data[: max(0, self.left)]

    def read(self, size: int) -> bytes:
        data = self._buffered.read(size if self.left is None else min(size, max(0, self.left)))
        if self.left is not None:
            self.left -= len(data)
        self.digest.update(data)
        return data

    def position(self) -> int:
        return 0

    def close(self) -> None:
        self._src.close()


def _light(config: DataValidationConfig) -> DataValidationConfig:
    light = config.model_copy(deep=True)
    light.pii.names.enabled = False
    light.dedup.exact = False
    light.dedup.near.enabled = False
    return light


def _near_index(config: DataValidationConfig):
    from .dedup import NearDuplicateIndex

    near = config.dedup.near
    return NearDuplicateIndex(near.threshold, near.num_perm, near.shingle_words)


def _partitioned(keys, positions, partitions: int) -> list[tuple]:
    k = np.array(keys, dtype=np.uint64)
    p = np.array(positions, dtype=np.int64)
    part = (k % np.uint64(partitions)).astype(np.int64)
    return [(k[part == i], p[part == i]) for i in range(partitions)]


def shard_keys(shard: Shard, config: DataValidationConfig, partitions: int) -> tuple:
    """Pass 1: (lines, digest of the bytes read, one (keys, positions) pair per partition,
    one (band hashes, positions) pair per partition, then (positions, signatures))."""
    parser = Validator(_light(config))
    src = _Range(shard)
    max_line = config.schema_.max_line_bytes
    keys: list[np.ndarray] = []
    positions: list[int] = []
    near = _near_index(config) if config.dedup.near.enabled else None
    bands: list[int] = []
    band_positions: list[int] = []
    signed: list[int] = []
    signatures: list = []
    local, base = 0, shard.index << SHIFT
    dedup = config.dedup.exact or near is not None
    opening = (1,) if shard.start == 0 else ()  # a shard's line 1 opens a file only at byte 0
    block: list[bytes] = []

    def key_block(last: int) -> None:
        first = last - len(block) + 1
        parsed = parser.parse_block(block, first, texts=True, opening=opening, use_c=near is None)
        block.clear()
        if config.dedup.exact:
            keys.append(parsed.keys & np.uint64(_KEY_MASK))
            positions.extend((base | (first + parsed.at)).tolist())
        if near is not None:  # parsed in Python alone: near-dup on
            at = [base | (first + row.index) for row in parsed.parsed]
            for row, position in zip(parsed.parsed, at, strict=True):
                sig = near.signature(row.text)
                hashes = near.band_hashes(sig)
                bands.extend(hashes)
                band_positions.extend([position] * len(hashes))
                signed.append(position)
                signatures.append(sig)

    try:
        for piece in whole_lines(src, max_line):
            if type(piece) is not list:
                if block:
                    key_block(local)
                local += 1
                for _ in rest_of_line(src.readline, max_line):
                    pass
                continue
            if dedup:
                before = local
                fill_blocks(block, piece, lambda k, before=before: key_block(before + k))
            local += len(piece)
        if block:
            key_block(local)
    finally:
        src.close()
    sigs = np.stack(signatures) if signatures else np.zeros((0, 0), dtype=np.uint32)
    all_keys = np.concatenate(keys) if keys else np.zeros(0, dtype=np.uint64)
    return (
        local,
        src.digest.hexdigest(),
        *_partitioned(all_keys, positions, partitions),
        *_partitioned(bands, band_positions, partitions),
        (np.array(signed, dtype=np.int64), sigs),
    )


def first_occurrences(shards: int, *parts: tuple) -> tuple:
    """Pass 2, one partition: per shard, (duplicate positions, their first positions)."""
    keys = np.concatenate([k for k, _ in parts]) if parts else np.zeros(0, np.uint64)
    pos = np.concatenate([p for _, p in parts]) if parts else np.zeros(0, np.int64)
    order = np.lexsort((pos, keys))
    keys, pos = keys[order], pos[order]
    starts = np.ones(len(keys), dtype=bool)
    starts[1:] = keys[1:] != keys[:-1]
    first = pos[np.maximum.accumulate(np.where(starts, np.arange(len(keys)), 0))]
    dup, first = pos[~starts], first[~starts]
    owner = dup >> SHIFT
    out = tuple((dup[owner == s], first[owner == s]) for s in range(shards))
    return out if shards > 1 else out[0]


def band_collisions(*parts: tuple) -> np.ndarray:
    """Pass 2 (near-dup), one partition: the positions of rows that share a band key hash
    with another row."""
    if not parts:
        return np.zeros(0, np.int64)
    keys = np.concatenate([k for k, _ in parts])
    pos = np.concatenate([p for _, p in parts])
    order = np.argsort(keys, kind="stable")
    keys, pos = keys[order], pos[order]
    shared = np.zeros(len(keys), dtype=bool)
    same = keys[1:] == keys[:-1]
    shared[1:] |= same
    shared[:-1] |= same
    return np.unique(pos[shared])


def signatures_of(signed: tuple, wanted: np.ndarray) -> tuple:
    """The (positions, signatures) of pass 1's rows among `wanted`."""
    positions, sigs = signed
    keep = np.isin(positions, wanted)
    return positions[keep], sigs[keep]


def near_duplicates(config: DataValidationConfig, candidates: list[tuple]) -> dict:
    """The single process's near-dup index run over the colliding rows in input order:
    {position: the position it is similar to}. Exact duplicates, which the single process
    never shows this index, may be among them: one has its first occurrence's band keys,
    so it adds no bucket and changes no other row's answer (and its own is not asked)."""
    positions = np.concatenate([p for p, _ in candidates]) if candidates else np.zeros(0, np.int64)
    if not len(positions):
        return {}
    sigs = np.concatenate([s for _, s in candidates if len(s)])
    order = np.argsort(positions, kind="stable")
    index, found = _near_index(config), {}
    for i in order.tolist():
        pos = int(positions[i])
        first = index.check_signature(sigs[i], pos)
        if first is not None:
            found[pos] = first
    return found


class _Known:
    """A dedup index of one shard that answers from what pass 2 decided, by global line:
    the exact index's `add(key, line)` and the near-dup index's `check(text, line)`."""

    def __init__(self, first_by_line: dict[int, int]):
        self._first = first_by_line

    def add(self, key: int, line: int) -> int | None:
        return self._first.get(line)

    def add_many(self, keys: np.ndarray, lines: np.ndarray) -> np.ndarray:
        return np.array([self._first.get(line, 0) for line in lines.tolist()], dtype=np.int64)

    def check(self, text: str, line: int) -> int | None:
        return self._first.get(line)

    def close(self) -> None:
        pass


class _Bytes:
    def __init__(self):
        self.parts: list[bytes] = []
        self.bytes = 0

    def write(self, data: bytes) -> None:
        self.parts.append(data)
        self.bytes += len(data)


_FINDERS: dict[str, Any] = {}


def _finder(config: DataValidationConfig):
    """One name finder per worker process (the NER model loads once, not per shard)."""
    key = config.pii.names.model_dump_json()
    if key not in _FINDERS:
        _FINDERS[key] = name_finder(config)
    return _FINDERS[key]


def _drill(shard: Shard) -> None:
    spec = os.environ.get(DRILL_KILL, "")
    if spec and spec.split(":", 1)[0] == str(shard.index):
        marker = spec.split(":", 1)[1]
        if not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)


def _line(first_lines: list[int], position: int) -> int:
    return first_lines[position >> SHIFT] + (position & _LOW) - 1


def validate_shard(
    shard: Shard, first_lines: list[int], lines: Lines, config: DataValidationConfig, near: dict, *duplicates: tuple
) -> dict:
    """Pass 3: the shard's clean and quarantine bytes, tallies and the digest of what it
    read. `near`: this shard's near duplicates, {position: the position it is similar to}."""
    _drill(shard)
    first_by_line = {}
    for dup, first in duplicates:
        for d, f in zip(dup.tolist(), first.tolist(), strict=False):
            first_by_line[_line(first_lines, d)] = _line(first_lines, f)
    v = Validator(
        config,
        None,
        exact=_Known(first_by_line),
        names=_finder(config) if config.pii.names.enabled else None,
        lines=lines,
        near=_Known({_line(first_lines, d): _line(first_lines, f) for d, f in near.items()}),
    )
    clean, quarantine = _Bytes(), _Bytes()
    src = _Range(shard)
    try:
        with long_lived_frozen():
            rows_in, rows_out = stream(src, v, clean, quarantine, config, False, first_line=first_lines[shard.index])
    finally:
        src.close()
    return {
        "clean": b"".join(clean.parts),
        "quarantine": b"".join(quarantine.parts),
        "rows_in": rows_in,
        "rows_out": rows_out,
        "digest": src.digest.hexdigest(),
        "by_reason": dict(v.by_reason),
        "pii_found": dict(v.pii_found),
        "pii_redacted": dict(v.pii_redacted),
        "rows_with_pii": v.rows_with_pii,
        "samples": v.samples,
        "length": v.stats.length.counts,
        "pii_density": v.stats.pii_density.counts,
    }


Submit = Callable[..., Any]  # submit(fn, *args, num_returns=n) -> a handle, or n handles
Get = Callable[[Any], Any]


def run(
    path: str,
    outputs,
    config: DataValidationConfig,
    reference_stats: str | None,
    submit: Submit,
    get: Get,
    shard_bytes: int,
    partitions: int,
    log: Callable[[str], None] = print,
):
    """The three passes through `submit`/`get` (Ray's, or calls in this process)."""
    import time

    from .drift import DataStats

    reference = DataStats.load(reference_stats) if reference_stats else None
    started = time.perf_counter()
    shards, inputs = plan(path, shard_bytes)
    stamps = {f: os.stat(f).st_mtime_ns for f in inputs.files}
    size = inputs.size
    log(
        f"[validate] {len(shards)} shard(s) of {path} ({size / 2**20:.1f} MiB"
        f"{f' in {len(inputs.files):,} files' if inputs.folder else ''}), {partitions} partition(s)"
    )
    keyed = [submit(shard_keys, s, config, partitions, num_returns=3 + 2 * partitions) for s in shards]
    first_lines, lines = _number(shards, [get(k[0]) for k in keyed], inputs)
    reduced = [
        submit(first_occurrences, len(shards), *(k[2 + p] for k in keyed), num_returns=len(shards))
        for p in range(partitions)
    ]
    if len(shards) == 1:
        reduced = [[r] for r in reduced]
    near: dict[int, int] = {}
    if config.dedup.near.enabled:
        near = _near_pass(config, keyed, partitions, submit, get)
        log(f"[validate] near duplicates: {len(near):,} (MinHash over the rows that share a band)")
    by_shard: list[dict] = [{} for _ in shards]
    for pos, first in near.items():
        by_shard[pos >> SHIFT][pos] = first
    done = [
        submit(validate_shard, s, first_lines, lines, config, by_shard[s.index], *(r[s.index] for r in reduced))
        for s in shards
    ]
    out = Outputs(outputs, config.chunk_size)
    totals = Totals(reference, DataStats(), Counter(), Counter(), Counter(), 0, [])
    with out:
        rows_in, rows_out = _gather(shards, done, keyed, stamps, out, totals, get, started, log)
    root = out.commit()
    return finish(
        totals,
        config,
        inputs,
        any(s.end < 0 for s in shards),
        outputs,
        rows_in,
        rows_out,
        root,
        out.clean.bytes,
        time.perf_counter() - started,
    )


def _number(shards: list, counts: list[int], inputs) -> tuple[list[int], Lines]:
    """Each shard's first line number, from the lines each counted, and where each file of
    a folder starts."""
    first_lines, line, lines = [], 1, Lines()
    for shard, n in zip(shards, counts, strict=False):
        if inputs.folder and shard.start == 0:
            lines.begin(inputs.name(shard.path), line)
        first_lines.append(line)
        line += n
    return first_lines, lines


def _gather(shards, done, keyed, stamps: dict, out, totals: Totals, get: Get, started: float, log) -> tuple[int, int]:
    """The shards' outputs written in input order, each checked to be of the bytes pass 1
    read; (rows in, rows out)."""
    import time

    rows_in = rows_out = read = 0
    logged = 0.0
    for shard, handle in zip(shards, done, strict=False):
        part = get(handle)
        if part["digest"] != get(keyed[shard.index][1]) or os.stat(shard.path).st_mtime_ns != stamps[shard.path]:
            raise InputError(
                f"{shard.path}: changed while being read (bytes {shard.start}-{shard.end} differ "
                "between passes); validate a copy that is not being written"
            )
        out.clean.write(part["clean"])
        out.quarantine.write(part["quarantine"])
        totals.add(part)
        rows_in += part["rows_in"]
        rows_out += part["rows_out"]
        read += (shard.end if shard.end >= 0 else os.path.getsize(shard.path)) - shard.start
        elapsed = time.perf_counter() - started
        if elapsed - logged >= 5.0 or shard.index == len(shards) - 1:
            logged = elapsed
            log(
                f"[validate] {shard.index + 1}/{len(shards)} shards: {rows_in:,} rows, "
                f"{read / 2**20 / max(elapsed, 1e-9):.1f} MB/s"
            )
    return rows_in, rows_out


def _near_pass(config, keyed, partitions, submit: Submit, get: Get) -> dict[int, int]:
    """Pass 2 for near duplicates: the colliding rows per partition, their signatures from
    each shard's pass 1, then the single process's index over them here."""
    colliding = [submit(band_collisions, *(k[2 + partitions + p] for k in keyed)) for p in range(partitions)]
    wanted = np.unique(np.concatenate([get(c) for c in colliding]))
    handles = [submit(signatures_of, k[2 + 2 * partitions], wanted) for k in keyed]
    return near_duplicates(config, [get(h) for h in handles])


def in_process(fn, *args, num_returns: int = 1):
    """`submit` for a plain loop: the call's value (a tuple when it returns several)."""
    return fn(*args)
