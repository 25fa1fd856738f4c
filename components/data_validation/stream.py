"""The stream loop: an input's lines read in whole-line pieces, judged a block at a time
(`blocks.Validator`), and written in input order to the clean and quarantine files.
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import gc
import itertools
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from kfp_llmops.components.common.progress import progress

from .blocks import Validator, clean_pieces
from .candidates import candidate_lines
from .config import DataValidationConfig
from .outputs import Sink, raw_field
from .pii_scan import Scan
from .reader import InputStream, rest_of_line, whole_lines
from .schema import Rejected


def stream(
    src: InputStream,
    validator: Validator,
    clean: Sink,
    quarantine: Sink,
    config: DataValidationConfig,
    show_progress: bool,
    first_line: int = 1,
) -> tuple[int, int]:
    """One input stream validated into the sinks: (rows in, rows out), the stream's own."""
    return _Stream(src, validator, clean, quarantine, config, show_progress, first_line).run()


class _Stream:
    """Lines are judged a block at a time (`check_lines`). With names on, rows then wait
    in order (at most `_PENDING_ROWS`) until their doubtful name candidates fill one NER
    batch, joining it one by one, so each batch is the one a row at a time would make;
    both outputs keep input order. A shard's lines are numbered from its `first_line`."""

    def __init__(self, src, validator: Validator, clean, quarantine, config, show_progress: bool, first_line: int):
        self.src, self.validator, self.clean, self.quarantine = src, validator, clean, quarantine
        self.max_line = config.schema_.max_line_bytes
        self.first_line = first_line
        self.rows_in, self.rows_out = first_line - 1, 0
        self.bar = progress(src.size, f"validate {os.path.basename(src.path)}", enabled=show_progress)
        self.last_pos = 0
        self.batched = validator.names is not None
        self.batch = config.pii.names.ner_batch_size
        # (line, raw, outcome: clean bytes, Scan or Rejected); a run of clean rows is one entry
        self.pending: list[tuple[int, bytes, Any]] = []
        self.block: list[bytes] = []  # lines waiting for `judge_block`
        self.doubtful = self.waiting = 0  # doubtful candidates and rows in `pending`

    def run(self) -> tuple[int, int]:
        src, validator = self.src, self.validator
        try:
            for piece in whole_lines(src, self.max_line, self.rows_in):
                if type(piece) is list:
                    self.take(piece)
                    continue
                self.drain()
                self.rows_in += 1
                at = validator.lines.where(self.rows_in)
                _quarantine_overlong(src, self.quarantine, at, piece.head, self.max_line)
                validator.by_reason["line_too_long"] += 1
            self.drain()
            self.bar.update(src.size - self.last_pos)
        finally:
            self.bar.close()
        return self.rows_in - self.first_line + 1, self.rows_out

    def drain(self) -> None:
        """Everything read so far judged and written."""
        if self.block:
            self.judge_block()
        if self.pending:
            self.flush()

    def take(self, lines: list[bytes]) -> None:
        """Whole lines from the reader's buffer into blocks."""
        before = self.rows_in
        fill_blocks(self.block, lines, lambda k: self.judge_block(before + k))
        self.rows_in += len(lines)
        if self.rows_in >> 10 != before >> 10:
            pos = self.src.position()
            self.bar.set_postfix_str(f"{self.rows_in:,} rows", refresh=False)
            self.bar.update(pos - self.last_pos)
            self.last_pos = pos

    def reject(self, rej: Rejected, line_no: int, line: bytes, into: list[bytes]) -> None:
        """The quarantine line of a rejected row into `into` (the caller writes a block's
        at once: one write and one hash update instead of one a row)."""
        validator = self.validator
        validator.by_reason[rej.reason] += 1
        entry = {**validator.lines.where(line_no), "reason": rej.reason, "field": rej.field, "detail": rej.detail}
        entry.update(raw_field(line))
        into.append(orjson.dumps(entry) + b"\n")
        if len(validator.samples) < 20:
            validator.samples.append({k: v for k, v in entry.items() if k not in ("raw", "raw_b64")})

    def judge_block(self, last_line: int | None = None) -> None:
        """The lines in `block` (the last numbered `last_line`, by default the last read)
        through `judge_lines`. Names off, their clean rows are written in one go; names
        on, they join `pending` in order (a run of clean rows as one entry)."""
        block = self.block
        first = (self.rows_in if last_line is None else last_line) - len(block) + 1
        lengths: list[int] = []
        outcomes, from_c = self.validator.judge_lines(block, first, candidate_lines(block, self.batched), lengths)
        self.validator.stats.add_lengths(lengths)
        if self.batched:
            self.wait(first, outcomes, from_c)
            block.clear()
            return
        kept: list[bytes] = []
        rejected: list[bytes] = []
        for piece in clean_pieces(from_c, outcomes):
            if type(piece) is bytes:
                kept.append(piece)
            else:
                self.reject(outcomes[piece], first + piece, block[piece], rejected)
        if kept:
            self.clean.write(b"".join(kept))
        if rejected:
            self.quarantine.write(b"".join(rejected))
        self.rows_out += len(block) - len(rejected)
        block.clear()

    def wait(self, first: int, outcomes: list, from_c) -> None:
        """A judged block's rows into `pending`. A run of clean rows waits as one entry, cut
        where one row at a time would settle for `_PENDING_ROWS` (so every NER batch is the
        same)."""
        for piece in clean_pieces(from_c, outcomes):
            if type(piece) is bytes:
                rows = piece.count(b"\n")
                while self.waiting + rows >= _PENDING_ROWS:
                    take = _PENDING_ROWS - self.waiting
                    cut = int(np.flatnonzero(np.frombuffer(piece, dtype=np.uint8) == 10)[take - 1]) + 1
                    self.pending.append((0, b"", piece[:cut]))
                    self.waiting += take
                    self.flush()
                    piece, rows = piece[cut:], rows - take
                if rows:
                    self.pending.append((0, b"", piece))
                    self.waiting += rows
                continue
            outcome = outcomes[piece]
            if type(outcome) is Scan:
                self.doubtful += len(outcome.proposal.doubtful)
            self.pending.append((first + piece, self.block[piece], outcome))
            self.waiting += 1
            if self.doubtful >= self.batch or self.waiting >= _PENDING_ROWS:
                self.flush()

    def flush(self) -> None:
        """The waiting rows' names settled in one go; every waiting row written, in order."""
        validator = self.validator
        scans = [s.proposal for _, _, s in self.pending if type(s) is Scan]
        settled = iter(validator.names.settle(scans))
        kept: list[bytes] = []
        rejected: list[bytes] = []
        for line_no, line, outcome in self.pending:
            if type(outcome) is bytes:
                kept.append(outcome)
                continue
            if type(outcome) is Rejected:
                self.reject(outcome, line_no, line, rejected)
                continue
            try:
                kept.append(orjson.dumps(validator.complete(outcome, next(settled))) + b"\n")
            except Rejected as rej:
                self.reject(rej, line_no, line, rejected)
        data = b"".join(kept)
        self.clean.write(data)
        if rejected:
            self.quarantine.write(b"".join(rejected))
        self.rows_out += data.count(b"\n")  # a clean row is one line: orjson escapes every newline
        self.pending.clear()
        self.doubtful = self.waiting = 0


_PENDING_ROWS = 8192
_BLOCK_ROWS = 8192
_BLOCK_BYTES = 4 << 20


@contextlib.contextmanager
def long_lived_frozen():
    """The objects alive before the rows are read (spaCy's model, imported modules) out of
    the garbage collector's sight while they are: each full collection would walk all of
    them again for the rows' short-lived cycles (names on, a fifth of the run's time)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def fill_blocks(block: list[bytes], lines: list[bytes], full: Callable[[int], None]) -> None:
    """Append `lines` to `block`; each time it holds `_BLOCK_ROWS` lines or `_BLOCK_BYTES`
    bytes (or one line over that), `full(k)` (`k`: how many of `lines` it holds by then)
    judges and empties it. Bigger blocks spread each block's fixed cost (a few hundred
    microseconds of calls into C, numpy and Hyperscan) over more rows; the byte bound keeps
    a block of long lines as small in memory as one of short ones."""
    i, size = 0, sum(map(len, block))
    while i < len(lines):
        piece = lines[i : i + _BLOCK_ROWS - len(block)]
        more = sum(map(len, piece))
        if size + more > _BLOCK_BYTES:
            fits = bisect.bisect_right(list(itertools.accumulate(map(len, piece))), _BLOCK_BYTES - size)
            piece = piece[: max(fits, 0 if block else 1)]
            more = _BLOCK_BYTES  # full now
        block.extend(piece)
        i += len(piece)
        size += more
        if len(block) >= _BLOCK_ROWS or size >= _BLOCK_BYTES:
            full(i)
            size = 0


def _quarantine_overlong(src: InputStream, quarantine: Sink, at: dict, head: bytes, max_line: int) -> None:
    """Stream an over-long line (`at`: its file and line) into quarantine as base64, never
    holding it whole."""
    quarantine.write(
        orjson.dumps({**at, "reason": "line_too_long", "field": None, "detail": f"longer than {max_line} bytes"})[:-1]
        + b',"raw_b64":"'
    )
    pending, total = head, len(head)
    for piece in rest_of_line(src.reader.readline, max_line):
        total += len(piece)
        pending += piece
        cut = len(pending) - len(pending) % 3
        quarantine.write(base64.b64encode(pending[:cut]))
        pending = pending[cut:]
    quarantine.write(base64.b64encode(pending) + b'","bytes":' + str(total).encode() + b"}\n")
