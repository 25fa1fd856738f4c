"""Blocks of lines judged at once (`Validator`): each line's verdict is the one a row
at a time would reach (parse and schema, dedup, the PII scan), with the plain rows parsed
and the candidate rows judged in C where it can (plain_rows.c, pii_rows.c).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import orjson

from . import pii_rows, plain_rows
from .candidates import NAMES, NONE, Kinds
from .config import DataValidationConfig, RecordFormat
from .dedup import FingerprintIndex, NearDuplicateIndex, fingerprints, normalize
from .drift import DataStats
from .names import Proposal
from .pii_scan import PiiScan, Scan
from .reader import Lines
from .schema import Rejected, Schema, dedup_text


class ParsedRow(NamedTuple):
    """A line parsed: its index in the block, its object (None: C parsed it; loaded when
    a later step needs it), its format, its field values when plain, and its dedup text
    (None without texts, or where C keeps its key)."""

    index: int
    obj: dict | None
    fmt: RecordFormat
    values: list[str] | None
    text: str | None


class Row(NamedTuple):
    """A unique row waiting for its verdict: `ParsedRow` without the dedup text."""

    index: int
    obj: dict | None
    fmt: RecordFormat
    values: list[str] | None


class Validator:
    """Blocks of lines judged: parsed and held to the schema (`Schema`), deduplicated,
    scanned for PII (`PiiScan`); what one row at a time would conclude, a block at a
    time, and in C where it can be. Keeps the run's statistics and counts."""

    c_patterns = True  # plain candidate rows (no name candidate) judged by pii_rows.c

    def __init__(
        self,
        config: DataValidationConfig,
        reference: DataStats | None = None,
        exact=None,
        names=None,
        lines: Lines | None = None,
        near=None,
    ):
        """`exact` replaces the exact-dedup index (an object with `add(key, line)`), `near`
        the near-duplicate one (`check(text, line)`) and `names` the name finder: a shard
        of a sharded run passes the duplicates its shuffle found and the finder its process
        already loaded. `lines` says which file
        a line number is in (a folder's files are one stream)."""
        self.config = config
        self.lines = lines or Lines()
        self.schema = Schema(config.schema_)
        self.pii = PiiScan(config, names)
        self.names = self.pii.names
        self.reference = reference
        self.exact = (exact or FingerprintIndex()) if config.dedup.exact else None
        # The plain_rows function (None: the Python path), looked up before any work: a missing
        # extension is one line saying what to do.
        self._plain_rows_fn = plain_rows.load()
        near_index, near = near, config.dedup.near
        self.near = (
            (near_index or NearDuplicateIndex(near.threshold, near.num_perm, near.shingle_words))
            if near.enabled
            else None
        )
        self.stats = DataStats()
        self.by_reason: Counter[str] = Counter()
        self.samples: list[dict] = []

    @property
    def pii_found(self) -> Counter:
        return self.pii.found

    @property
    def pii_redacted(self) -> Counter:
        return self.pii.redacted

    @property
    def rows_with_pii(self) -> int:
        return self.pii.rows_with_pii

    def close(self) -> None:
        if self.exact is not None:
            self.exact.close()

    # -- dedup ---------------------------------------------------------------------------

    def _duplicate_of(self, first: int) -> Rejected:
        return Rejected("duplicate", None, f"same text as {self.lines.cite(first)}")

    def _near_duplicate_of(self, first: int) -> Rejected:
        return Rejected("near_duplicate", None, f"similar to {self.lines.cite(first)}")

    def parse_lines(
        self,
        lines: list[bytes],
        first_line: int,
        texts: bool,
        opening: Iterable[int] | None = None,
        indices: Iterable[int] | None = None,
    ) -> tuple[list[ParsedRow], dict[int, Rejected]]:
        """`parse` of consecutive lines numbered from `first_line` (`opening`: the line
        numbers that open a file and may start with a BOM, by default `self.lines`';
        `indices`: only these of them): the parsed (`ParsedRow`s, their dedup text when
        `texts`) and the rejected by index.

        Most rows are plain: valid JSON holding exactly the fields of a string-only format,
        each a string within bounds. Those are judged here with nothing but that check;
        every other row goes through `parse`, so each verdict is `parse`'s."""
        parsed: list[ParsedRow] = []
        rejected: dict[int, Rejected] = {}
        loads, plain_formats = orjson.loads, self.schema.plain
        opens = {n - first_line for n in (self.lines.firsts if opening is None else opening)}
        for i in range(len(lines)) if indices is None else indices:
            raw = lines[i]
            first_of_file = i in opens
            fmt = values = None
            if not first_of_file:
                try:
                    obj = loads(raw)
                except orjson.JSONDecodeError:
                    obj = None
                if type(obj) is dict:
                    keys = obj.keys()
                    for names, plain_fmt, spec in plain_formats:
                        if keys != names:
                            continue
                        if spec is not None:
                            values = []
                            for name, low, high in spec:
                                value = obj[name]
                                if type(value) is not str or len(value) > high or (low and len(value.strip()) < low):
                                    values = None
                                    break
                                values.append(value)
                            fmt = plain_fmt if values is not None else None
                        break
            if fmt is None:
                try:
                    obj, fmt = self.schema.parse(raw, first_of_file)
                except Rejected as rej:
                    rejected[i] = rej.kept()
                    continue
                parsed.append(ParsedRow(i, obj, fmt, None, dedup_text(obj, fmt) if texts else None))
            else:
                text = "\x1f".join(map(normalize, values)) if texts else None
                parsed.append(ParsedRow(i, obj, fmt, values, text))
        return parsed, rejected

    def check_lines(
        self, lines: list[bytes], first_line: int, candidates: dict[int, Kinds], lengths: list[int]
    ) -> list:
        """`check` for consecutive lines (numbered from `first_line`): per line its clean
        bytes (newline included) or its `Rejected`, in order; names on, a line that may
        hold a name gets its `Scan` instead (`begin`'s), for the caller to settle and
        `complete` where one line at a time would (`begin` leaves no state `complete` reads).
        `judge_lines` with every row's outcome in the list."""
        out, from_c = self.judge_lines(lines, first_line, candidates, lengths)
        return out if from_c is None else from_c.fill(out)

    def judge_lines(
        self, lines: list[bytes], first_line: int, candidates: dict[int, Kinds], lengths: list[int]
    ) -> tuple[list, CleanFromC | None]:
        """`check_lines`, but the rows C judged alone (the most) are None in the list, their
        clean bytes in the `CleanFromC` returned with it: no object a row for them.

        Two steps instead of one row at a time: `_deduplicated`, then each row's verdict,
        so the verdicts are `check`'s. A plain row that is no candidate (`candidates`:
        `candidate_lines`, with names when they are on) can have no finding: its clean
        form is the object as parsed and its length goes to `lengths` for the caller's
        `stats.add_lengths`. Every other row is scanned as `begin` scans it.
        """
        out, unique, from_c = self._deduplicated(lines, first_line, candidates, lengths)
        proposals: dict[int, Proposal] = {}
        if self.names is not None:
            unique, candidates, proposals = self._names_first(lines, unique, candidates)
        unique = self._patterns_in_c(lines, unique, candidates, out)
        # `dumps(...) + b"\n"`, not OPT_APPEND_NEWLINE: orjson's result keeps a 4 KiB
        # buffer, and a block of them held at once costs 4 KiB a row; the sum is exact-sized.
        dumps = orjson.dumps
        for i, obj, fmt, values in unique:
            kinds = candidates.get(i, NONE)
            if values is not None and kinds == NONE:
                lengths.append(sum(map(len, values)))
                out[i] = dumps(obj) + b"\n"
                continue
            names = kinds is None or NAMES in kinds
            if names and kinds is not None:
                kinds = kinds - {NAMES}
            scan = self.pii.scan(obj, fmt, kinds, names, proposals.get(i))
            if self.names is not None:
                out[i] = scan
                continue
            try:
                out[i] = dumps(self.complete(scan, None)) + b"\n"
            except Rejected as rej:
                out[i] = rej.kept()
        return out, from_c

    def _names_first(
        self, lines: list[bytes], unique: list[Row], candidates: dict[int, Kinds]
    ) -> tuple[list[Row], dict[int, Kinds], dict[int, Proposal]]:
        """Names on, the name finder's pass over each flat row that is a names candidate,
        before its patterns: most find nothing (the line test is loose), and such a row is
        then no names candidate (its kinds lose `NAMES`), so it is judged as names off
        judges it, in C where it can be, instead of waiting for the NER batch as a scan.
        Returns the rows (a C-parsed one loaded), the kinds, and the proposals found."""
        candidates = dict(candidates)
        proposals: dict[int, Proposal] = {}
        rows = []
        for row in unique:
            i, obj, fmt, _ = row
            kinds = candidates.get(i, NONE)
            if kinds is not None and NAMES in kinds:
                if obj is None:
                    row = load_row(lines, row)
                    obj = row.obj
                if all(type(v) is str for v in obj.values()):  # `PiiScan.scan`'s strings
                    proposal = self.names.propose(list(obj.values()))
                    if proposal.per_text is None:
                        candidates[i] = kinds - {NAMES}
                    else:
                        proposals[i] = proposal
            rows.append(row)
        return rows, candidates, proposals

    @functools.cached_property
    def _c_formats(self) -> plain_rows.Formats:
        """The record formats as plain_rows.c and pii_rows.c read them, built once."""
        return plain_rows.Formats(self.schema.formats)

    def _patterns_in_c(self, lines: list[bytes], unique: list[Row], candidates: dict[int, Kinds], out: list) -> list:
        """The unique plain rows with pattern candidates and no name candidate judged in C
        (`pii_rows`), which gives each the clean row, counts and statistics the Python
        path would, into `out`. It declines what it does not follow (a row to quarantine
        among them). Returns the rows left to Python, each with its object (a row C parsed
        is loaded only now, when C did not judge it)."""
        rows = []
        if self.c_patterns and pii_rows.load() is not None:
            for k, (i, obj, _, values) in enumerate(unique):
                kinds = candidates.get(i, NONE)
                if (obj is None or values is not None) and kinds and NAMES not in kinds:
                    rows.append(k)
        done: set[int] = set()
        if rows:
            at = [unique[k].index for k in rows]
            judged = pii_rows.judge(
                [lines[i] for i in at],
                [pii_rows.kinds_mask(candidates[i]) for i in at],
                self._c_formats,
                self.pii.redact_types,
                self.pii.quarantine_secrets,
                self.pii.max_density,
            )
            rows_out, offsets = judged.rows, judged.offsets.tolist()
            picked = np.flatnonzero(judged.done)
            for k in picked.tolist():
                out[at[k]] = rows_out[offsets[k] : offsets[k + 1]]
                done.add(rows[k])
            self.stats.add_lengths(judged.chars[picked], judged.density[picked])
            self.pii.found.update(judged.found)
            self.pii.redacted.update(judged.redacted)
            self.pii.rows_with_pii += judged.rows_with_pii
        left = []
        for k, row in enumerate(unique):
            if k in done:
                continue
            left.append(load_row(lines, row) if row.obj is None else row)
        return left

    def parse_block(
        self,
        lines: list[bytes],
        first_line: int,
        texts: bool,
        opening: Iterable[int] | None = None,
        python: Iterable[int] = (),
        use_c: bool = True,
    ) -> ParsedBlock:
        """`parse_lines` of a block, its plain rows in C where it can (`plain_rows.c`:
        not a file's first line; not at all without `use_c`: the near-dup index wants each
        row's text), with every parsed row's dedup key in line order when `texts`. Rows in
        `python` (that need a scan: a candidate) which C parsed keep its key and bounds
        check and are parsed without their object (a `ParsedRow`'s obj None), loaded when
        needed (`_patterns_in_c`); the other rows C parsed are its alone (`c_rows`)."""
        n = len(lines)
        scan = None
        if use_c and lines and self._plain_rows_fn is not None:
            scan = plain_rows.scan(self._plain_rows_fn, lines, self._c_formats)
        loaded = np.zeros(0, dtype=np.int64)
        if scan is None:
            mine = loaded
            parsed, rejected = self.parse_lines(lines, first_line, texts, opening)
        else:
            claimed = scan.status >= 0
            opens = self.lines.firsts if opening is None else opening
            claimed[[k - first_line for k in opens if 0 <= k - first_line < n]] = False
            wanted = np.zeros(n, dtype=bool)
            wanted[[i for i in python if i < n]] = True
            mine = np.flatnonzero(claimed & ~wanted)
            loaded = np.flatnonzero(claimed & wanted)
            rest = np.flatnonzero(~claimed).tolist()
            parsed, rejected = self.parse_lines(lines, first_line, texts, opening, indices=rest)
            if len(loaded):
                plain = self.schema.plain
                for i, f in zip(loaded.tolist(), scan.status[loaded].tolist(), strict=True):
                    parsed.append(ParsedRow(i, None, plain[f][1], None, None))  # loaded when needed
                parsed.sort(key=lambda row: row.index)
        at = keys = None
        if texts:
            by_python = [row for row in parsed if row.text is not None]
            at = np.fromiter((row.index for row in by_python), dtype=np.int64, count=len(by_python))
            keys = fingerprints([row.text for row in by_python])
            by_c = np.concatenate([mine, loaded])
            if len(by_c):
                at, keys = np.concatenate([by_c, at]), np.concatenate([scan.keys[by_c], keys])
                order = np.argsort(at, kind="stable")
                at, keys = at[order], keys[order]
        return ParsedBlock(parsed, rejected, mine, scan, at, keys)

    def _deduplicated(
        self, lines: list[bytes], first_line: int, candidates: dict[int, Kinds], lengths: list[int]
    ) -> tuple[list, list[Row], CleanFromC | None]:
        """`parse_block`, then every parsed row's key through the exact index in one
        `add_many` and the near index row by row, in order: (per line its `Rejected` or
        None, the rows left (`Row`s), the clean rows of C's). Nothing a row does after its
        dedup changes what dedup says of another, so these are the verdicts of one row at a
        time. The rows C parsed (plain, no
        pattern candidate) are concluded here: their clean bytes, and their lengths
        straight into the stats (`lengths` is for the rows Python concludes)."""
        n = len(lines)
        block = self.parse_block(
            lines,
            first_line,
            self.exact is not None or self.near is not None,
            python=candidates,
            use_c=self.near is None,
        )
        parsed, mine = block.parsed, block.c_rows
        out: list = [None] * n
        for i, rej in block.rejected.items():
            out[i] = rej
        firsts = np.zeros(n, dtype=np.int64)
        if self.exact is not None and block.at is not None and len(block.at):
            firsts[block.at] = self.exact.add_many(block.keys, first_line + block.at)
        from_c = None
        if len(mine):
            repeated = firsts[mine] != 0
            for i in mine[repeated].tolist():
                out[i] = self._duplicate_of(int(firsts[i]))
            kept = mine[~repeated]
            from_c = CleanFromC(block.scan.buf, block.scan.offsets, kept)
            self.stats.add_lengths(block.scan.chars[kept])
        near = self.near
        unique: list[Row] = []
        for i, obj, fmt, values, text in parsed:
            if firsts[i]:
                out[i] = self._duplicate_of(int(firsts[i]))
                continue
            if near is not None:
                first = near.check(text, first_line + i)
                if first is not None:
                    out[i] = self._near_duplicate_of(first)
                    continue
            unique.append(Row(i, obj, fmt, values))
        return out, unique, from_c

    def complete(self, scan: Scan, name_spans: list | None) -> dict:
        """A row's clean record once the doubtful names of its `scan` are settled."""
        clean, density, chars = self.pii.conclude(scan, name_spans)
        self.stats.add(chars, density)
        return clean


@dataclass
class ParsedBlock:
    """`Validator.parse_block`: the rows with their objects (`parse_lines`' tuples, a
    C-parsed one's text None) and the rejected (by index), the indexes of the rows C
    judged alone with its scan (`plain_rows.scan`), and every parsed row's index and
    dedup key, in line order (None without texts)."""

    parsed: list[ParsedRow]
    rejected: dict[int, Rejected]
    c_rows: np.ndarray
    scan: plain_rows.PlainScan | None
    at: np.ndarray | None
    keys: np.ndarray | None


@dataclass
class CleanFromC:
    """The clean rows C wrote for a block (`plain_rows.scan`: `buf`, sliced per line by
    `offsets`) that it judged alone and kept: the lines `kept`."""

    buf: bytes
    offsets: np.ndarray
    kept: np.ndarray

    def fill(self, out: list) -> list:
        """`out` (None at the kept lines) with each kept line's clean bytes."""
        buf = self.buf
        kept, offsets = self.kept, self.offsets
        for i, a, b in zip(kept.tolist(), offsets[kept].tolist(), offsets[kept + 1].tolist(), strict=True):
            out[i] = buf[a:b]
        return out


def load_row(lines: list[bytes], row: Row) -> Row:
    """A row C parsed (its object None) with its object and values: C keeps no object,
    so one is loaded only for a row that a later step leaves to Python."""
    obj = orjson.loads(lines[row.index])
    return Row(row.index, obj, row.fmt, [obj[name] for name in row.fmt.fields])


def clean_pieces(from_c: CleanFromC | None, out: list) -> list:
    """The block's clean bytes in line order as few objects as it takes, a rejected
    line as its index: each run of kept lines one slice of `buf` (consecutive lines
    are adjacent there), every other line its own outcome from `out` (`from_c` None: no
    line C judged)."""
    if from_c is None:
        return [o if type(o) is bytes else i for i, o in enumerate(out)]
    n, buf, offsets = len(out), from_c.buf, from_c.offsets
    others = np.ones(n, dtype=bool)
    others[from_c.kept] = False
    at = np.flatnonzero(others)
    edges = np.empty(2 * len(at) + 2, dtype=np.int64)  # each run of kept lines: [start, end)
    edges[0], edges[-1] = 0, n
    edges[1:-1:2], edges[2:-1:2] = at, at + 1
    bounds = offsets[edges].tolist()
    pieces = []
    for k, i in enumerate(at.tolist()):
        a, b = bounds[2 * k], bounds[2 * k + 1]
        if b > a:
            pieces.append(buf[a:b])
        o = out[i]
        pieces.append(o if type(o) is bytes else i)
    a, b = bounds[-2], bounds[-1]
    if b > a:
        pieces.append(buf[a:b])
    return pieces
