"""The streaming validator: every input line ends up in `clean.jsonl` or in
`quarantine.jsonl` with its line number, reason, field and raw bytes, in one pass.

Outputs are written to temporary names and renamed at the end, so a run that dies
half-way leaves no half dataset behind, and the clean data's Merkle root is computed as
it is written (no second read).
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import functools
import gc
import itertools
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from kfp_llmops.components.common import atomic, gates, integrity, merkle
from kfp_llmops.components.common.conversation import ROLES, TurnError, check_turns
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.progress import progress

from . import pii, pii_rows, plain_rows
from .candidates import NAMES, NONE, Kinds, candidate_lines
from .config import DataValidationConfig, RecordFormat
from .dedup import FingerprintIndex, NearDuplicateIndex, fingerprint, fingerprints, normalize
from .drift import DataStats, drift
from .names import Proposal
from .reader import Inputs, InputStream, Lines, input_files, open_input, rest_of_line, whole_lines

CLEAN_NAME = integrity.DATASET_FILE

REASONS = {
    "decode_error": "bytes are not valid UTF-8",
    "nul_byte": "the line holds a NUL byte (binary data, not text)",
    "blank_line": "the line is empty or only whitespace",
    "line_too_long": "the line is longer than schema.max_line_bytes",
    "json_error": "the line is not valid JSON",
    "not_object": "the JSON value is not an object",
    "missing_field": "a required field is absent (or no record format matches)",
    "wrong_type": "a field has the wrong type",
    "unexpected_field": "a field not in the schema (schema.allow_extra_fields is false)",
    "too_short": "a field is shorter than its min_chars",
    "too_long": "a field is longer than its max_chars",
    "unknown_role": "a conversation turn's role is not system, user or assistant",
    "empty_turn": "a conversation turn has no text",
    "bad_turn": "a conversation turn is not a {role, content} object, a system turn is not first, or no user turn",
    "no_assistant_turn": "the conversation does not end with an assistant turn (SFT trains on the assistant's)",
    "duplicate": "same normalized text as an earlier row",
    "near_duplicate": "MinHash-similar to an earlier row",
    "secret": "contains a secret and the policy quarantines secrets",
    "pii_density": "more of the record's words are PII than the policy allows",
}


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


class _Rejected(Exception):
    def __init__(self, reason: str, field: str | None = None, detail: str = ""):
        self.reason, self.field, self.detail = reason, field, detail

    def kept(self) -> _Rejected:
        """This verdict, to be kept past its `except`: without the traceback (and the
        parse error behind it) whose frames hold the block it came from in a reference
        cycle, which only the garbage collector would free."""
        self.__context__ = None
        return self.with_traceback(None)


class _Sink(atomic.AtomicFile):
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
        self.clean = _Sink(paths.clean, hashed_chunk=chunk_size)
        self.quarantine = _Sink(paths.quarantine)

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


class Validator:
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
        policy = pii.POLICIES[config.pii.policy.value]
        self.redact_types = frozenset(config.pii.redact) if config.pii.redact is not None else policy.redact
        unknown = self.redact_types - set(pii.ALL_TYPES)
        if unknown:
            raise InputError(f"pii.redact: unknown PII type(s) {sorted(unknown)}; known: {', '.join(pii.ALL_TYPES)}")
        self.quarantine_secrets = (
            policy.quarantine_secrets if config.pii.quarantine_secrets is None else config.pii.quarantine_secrets
        )
        self.max_density = policy.max_density if config.pii.max_density is None else config.pii.max_density
        self.names = (names or name_finder(config)) if config.pii.names.enabled else None
        self.reference = reference
        self.formats = config.schema_.formats
        self._format_keys = [(fmt, set(fmt.fields)) for fmt in self.formats]
        # Per format, its fields' (name, min_chars, max_chars) when all are strings: the
        # records `check_lines` can judge on its lean path.
        self._plain = [
            (
                keys,
                fmt,
                None
                if any(spec.type != "string" for spec in fmt.fields.values())
                else [(name, spec.min_chars, spec.max_chars) for name, spec in fmt.fields.items()],
            )
            for fmt, keys in self._format_keys
        ]
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
        self.pii_found: Counter[str] = Counter()
        self.pii_redacted: Counter[str] = Counter()
        self.rows_with_pii = 0
        self.samples: list[dict] = []

    def close(self) -> None:
        if self.exact is not None:
            self.exact.close()

    # -- one record ---------------------------------------------------------------------

    def _match_format(self, obj: dict) -> RecordFormat:
        for fmt, names in self._format_keys:  # fast path: exactly a format's fields
            if obj.keys() == names:
                return fmt
        best, best_hits = None, 0
        for fmt in self.formats:
            hits = sum(1 for name in fmt.fields if name in obj)
            if hits > best_hits:
                best, best_hits = fmt, hits
        if best is None:
            expected = " or ".join("+".join(f.fields) for f in self.formats)
            first = next(iter(self.formats[0].fields))
            raise _Rejected("missing_field", first, f"no record format matches; expected {expected}")
        return best

    def _check_schema(self, obj: Any) -> RecordFormat:
        if not isinstance(obj, dict):
            raise _Rejected("not_object", None, f"got {type(obj).__name__}")
        fmt = self._match_format(obj)
        for name, spec in fmt.fields.items():
            value = obj.get(name)
            if value is None:
                if spec.required:
                    raise _Rejected("missing_field", name, f"format {fmt.name} requires {name!r}")
                continue
            if spec.type == "messages":
                _check_conversation(value, name, spec)
                continue
            if not isinstance(value, str):
                raise _Rejected("wrong_type", name, f"expected string, got {type(value).__name__}")
            n = len(value.strip())
            if n < spec.min_chars:
                raise _Rejected("too_short", name, f"{n} < min_chars {spec.min_chars}")
            if len(value) > spec.max_chars:
                raise _Rejected("too_long", name, f"{len(value)} > max_chars {spec.max_chars}")
        if not self.config.schema_.allow_extra_fields:
            extra = [k for k in obj if k not in fmt.fields]
            if extra:
                raise _Rejected("unexpected_field", extra[0], f"format {fmt.name} has no field {extra[0]!r}")
        return fmt

    @staticmethod
    def dedup_text(obj: dict, fmt: RecordFormat) -> str:
        """What dedup compares: the format's fields, normalized, in order."""
        return "\x1f".join(_field_text(obj[name]) for name in fmt.fields if obj.get(name) is not None)

    def _duplicate_of(self, first: int) -> _Rejected:
        return _Rejected("duplicate", None, f"same text as {self.lines.cite(first)}")

    def _near_duplicate_of(self, first: int) -> _Rejected:
        return _Rejected("near_duplicate", None, f"similar to {self.lines.cite(first)}")

    def _dedup(self, obj: dict, fmt: RecordFormat, line_no: int) -> None:
        text = self.dedup_text(obj, fmt)
        if self.exact is not None:
            first = self.exact.add(fingerprint(text), line_no)
            if first is not None:
                raise self._duplicate_of(first)
        if self.near is not None:
            first = self.near.check(text, line_no)
            if first is not None:
                raise self._near_duplicate_of(first)

    def _scan_patterns(
        self, obj: dict, fmt: RecordFormat, kinds: Kinds, names: bool = True, proposal: Proposal | None = None
    ) -> _Scan:
        """Pattern findings in every string of the record (extra and nested fields too),
        and the name candidates when names are on. `kinds`: the pattern families whose
        candidates the raw line holds (`candidates.line_kinds`); with none the record
        has no pattern finding, so its strings are only collected. Without `names` the
        line holds no name candidate (`candidates.NAMES`): the name finder is skipped.
        `proposal`: the name finder's, already made of these strings (`_names_first`)."""
        scan = _Scan(obj, fmt)
        if all(type(v) is str for v in obj.values()):  # the common flat record
            if kinds != NONE:
                scan.scanned = {k: self._visit(v, k, scan, kinds) for k, v in obj.items()}
            else:
                scan.scanned = obj
                scan.strings.extend(obj.values())
        else:
            scan.scanned = self._visit(obj, "", scan, kinds)
        if self.names is not None:
            if proposal is None:
                proposal = self.names.propose(scan.strings) if names else Proposal(scan.strings, None, ())
            scan.proposal = proposal
        return scan

    def _visit(self, value: Any, path: str, scan: _Scan, kinds: Kinds) -> Any:
        """`_scan_patterns`' walk of one value (at `path`): its strings collected into
        `scan` and, unless `kinds` is NONE, scanned; a method, not a closure, so each
        record leaves no reference cycle for the garbage collector."""
        if isinstance(value, str):
            scan.strings.append(value)
            findings = pii.find_pii(value, kinds) if kinds != NONE else None
            if not findings:
                return value
            scan.n_findings += len(findings)
            for f in findings:
                self.pii_found[f.type] += 1
                if f.type in pii.SECRET_TYPES and scan.secret_field is None:
                    scan.secret_field = path
            return _Redaction(value, findings)
        if isinstance(value, dict):  # a turn's role is markup, never PII
            return {
                k: v if k == "role" and v in ROLES else self._visit(v, f"{path}.{k}" if path else k, scan, kinds)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self._visit(v, f"{path}[{i}]", scan, kinds) for i, v in enumerate(value)]
        return value

    def _conclude(self, scan: _Scan, name_spans: list | None) -> tuple[dict, float, int]:
        """Merge the confirmed names, then the density and secret verdicts and redaction.

        PII density = findings per word of the whole record (pii.word_count), so one
        email in a sentence is fine while a dump of contacts is not.
        """
        scanned, n_findings = scan.scanned, scan.n_findings
        if name_spans and any(name_spans):
            scanned, added = self._merge_names(scan.strings, name_spans, scanned)
            n_findings += added
        density = 0.0
        if n_findings:
            self.rows_with_pii += 1
            density = n_findings / max(1, sum(pii.word_count(s) for s in scan.strings))
        if scan.secret_field is not None and self.quarantine_secrets:
            raise _Rejected("secret", scan.secret_field, "secret found; policy quarantines secrets")
        if density > self.max_density:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(_finding_types(scanned).items()))
            raise _Rejected(
                "pii_density", None, f"PII density {density:.2f} > max_density {self.max_density:.2f} ({kinds})"
            )
        obj = scan.obj
        text_chars = sum(_field_chars(obj.get(n)) for n in scan.fmt.fields)
        return (self._apply(scanned) if n_findings else obj), density, text_chars

    def _merge_names(self, strings: list[str], name_spans: list, scanned: Any) -> tuple[Any, int]:
        """Add the PERSON/ADDRESS findings to the scanned record; a span the pattern engine
        already claimed (an email holding a name) stays its."""
        by_text = {text: spans for text, spans in zip(strings, name_spans, strict=False) if spans}
        added = [0]
        return self._merge(scanned, by_text, added), added[0]

    def _merge(self, value: Any, by_text: dict, added: list[int]) -> Any:
        """`_merge_names` of one value, the count of names added into `added[0]` (a method,
        not a closure: no reference cycle per record)."""
        if isinstance(value, _Redaction):
            extra = by_text.get(value.text, ())
            new = [f for f in extra if all(f.end <= k.start or f.start >= k.end for k in value.findings)]
            value.findings = sorted(value.findings + new, key=lambda f: f.start)
        elif isinstance(value, str):
            new = by_text.get(value)
            if not new:
                return value
            value = _Redaction(value, list(new))
        elif isinstance(value, dict):
            return {k: self._merge(v, by_text, added) for k, v in value.items()}
        elif isinstance(value, list):
            return [self._merge(v, by_text, added) for v in value]
        else:
            return value
        for f in new:
            self.pii_found[f.type] += 1
        added[0] += len(new)
        return value

    def _apply(self, value: Any) -> Any:
        if isinstance(value, _Redaction):
            for f in value.findings:
                if f.type in self.redact_types:
                    self.pii_redacted[f.type] += 1
            return pii.redact(value.text, value.findings, self.redact_types)
        if isinstance(value, dict):
            return {k: self._apply(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._apply(v) for v in value]
        return value

    def parse_lines(
        self,
        lines: list[bytes],
        first_line: int,
        texts: bool,
        opening: Iterable[int] | None = None,
        indices: Iterable[int] | None = None,
    ) -> tuple[list[tuple], dict[int, _Rejected]]:
        """`parse` of consecutive lines numbered from `first_line` (`opening`: the line
        numbers that open a file and may start with a BOM, by default `self.lines`';
        `indices`: only these of them): the parsed as (index, object, format, its values
        when plain, dedup text when `texts`) and the rejected by index.

        Most rows are plain: valid JSON holding exactly the fields of a string-only format,
        each a string within bounds. Those are judged here with nothing but that check;
        every other row goes through `parse`, so each verdict is `parse`'s."""
        parsed: list[tuple] = []
        rejected: dict[int, _Rejected] = {}
        loads, plain_formats = orjson.loads, self._plain
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
                    obj, fmt = self.parse(raw, first_of_file)
                except _Rejected as rej:
                    rejected[i] = rej.kept()
                    continue
                parsed.append((i, obj, fmt, None, self.dedup_text(obj, fmt) if texts else None))
            else:
                parsed.append((i, obj, fmt, values, "\x1f".join(map(normalize, values)) if texts else None))
        return parsed, rejected

    def check_lines(
        self, lines: list[bytes], first_line: int, candidates: dict[int, Kinds], lengths: list[int]
    ) -> list:
        """`check` for consecutive lines (numbered from `first_line`): per line its clean
        bytes (newline included) or its `_Rejected`, in order; names on, a line that may
        hold a name gets its `_Scan` instead (`begin`'s), for the caller to settle and
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
            scan = self._scan_patterns(obj, fmt, kinds, names, proposals.get(i))
            if self.names is not None:
                out[i] = scan
                continue
            try:
                out[i] = dumps(self.complete(scan, None)) + b"\n"
            except _Rejected as rej:
                out[i] = rej.kept()
        return out, from_c

    def _names_first(
        self, lines: list[bytes], unique: list[tuple], candidates: dict[int, Kinds]
    ) -> tuple[list[tuple], dict[int, Kinds], dict[int, Proposal]]:
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
                    row = _loaded(lines, row)
                    obj = row[1]
                if all(type(v) is str for v in obj.values()):  # `_scan_patterns`' strings
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
        return plain_rows.Formats(self.formats)

    def _patterns_in_c(self, lines: list[bytes], unique: list[tuple], candidates: dict[int, Kinds], out: list) -> list:
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
            at = [unique[k][0] for k in rows]
            judged = pii_rows.judge(
                [lines[i] for i in at],
                [pii_rows.kinds_mask(candidates[i]) for i in at],
                self._c_formats,
                self.redact_types,
                self.quarantine_secrets,
                self.max_density,
            )
            rows_out, offsets = judged.rows, judged.offsets.tolist()
            picked = np.flatnonzero(judged.done)
            for k in picked.tolist():
                out[at[k]] = rows_out[offsets[k] : offsets[k + 1]]
                done.add(rows[k])
            self.stats.add_lengths(judged.chars[picked], judged.density[picked])
            self.pii_found.update(judged.found)
            self.pii_redacted.update(judged.redacted)
            self.rows_with_pii += judged.rows_with_pii
        left = []
        for k, row in enumerate(unique):
            if k in done:
                continue
            left.append(_loaded(lines, row) if row[1] is None else row)
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
        check and are parsed as (index, None, format, None, None): their object is loaded
        when needed (`_patterns_in_c`); the other rows C parsed are its alone (`c_rows`)."""
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
                plain = self._plain
                for i, f in zip(loaded.tolist(), scan.status[loaded].tolist(), strict=True):
                    parsed.append((i, None, plain[f][1], None, None))  # loaded when needed
                parsed.sort(key=lambda row: row[0])
        at = keys = None
        if texts:
            by_python = [row for row in parsed if row[4] is not None]
            at = np.fromiter((row[0] for row in by_python), dtype=np.int64, count=len(by_python))
            keys = fingerprints([row[4] for row in by_python])
            by_c = np.concatenate([mine, loaded])
            if len(by_c):
                at, keys = np.concatenate([by_c, at]), np.concatenate([scan.keys[by_c], keys])
                order = np.argsort(at, kind="stable")
                at, keys = at[order], keys[order]
        return ParsedBlock(parsed, rejected, mine, scan, at, keys)

    def _deduplicated(
        self, lines: list[bytes], first_line: int, candidates: dict[int, Kinds], lengths: list[int]
    ) -> tuple[list, list[tuple], CleanFromC | None]:
        """`parse_block`, then every parsed row's key through the exact index in one
        `add_many` and the near index row by row, in order: (per line its `_Rejected` or
        None, the rows left as (index, object, format, values when plain), the clean rows
        of C's). Nothing a row does after its dedup changes what dedup says of another,
        so these are the verdicts of one row at a time. The rows C parsed (plain, no
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
        unique: list[tuple] = []
        for i, obj, fmt, values, text in parsed:
            if firsts[i]:
                out[i] = self._duplicate_of(int(firsts[i]))
                continue
            if near is not None:
                first = near.check(text, first_line + i)
                if first is not None:
                    out[i] = self._near_duplicate_of(first)
                    continue
            unique.append((i, obj, fmt, values))
        return out, unique, from_c

    def complete(self, scan: _Scan, name_spans: list | None) -> dict:
        """A row's clean record once the doubtful names of its `scan` are settled."""
        clean, density, chars = self._conclude(scan, name_spans)
        self.stats.add(chars, density)
        return clean

    def parse(self, raw: bytes, first_line: bool) -> tuple[dict, RecordFormat]:
        """Decode, parse and check the schema of one line, or raise _Rejected."""
        nul = raw.find(b"\x00")
        if nul >= 0:
            raise _Rejected("nul_byte", None, f"NUL at byte {nul}")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Rejected("decode_error", None, f"invalid UTF-8 at byte {exc.start}") from None
        if first_line and text.startswith("\ufeff"):
            text = text[1:]
        if not text.strip():
            raise _Rejected("blank_line")
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise _Rejected("json_error", None, str(exc).split(":")[0][:120]) from None
        return obj, self._check_schema(obj)


def _check_conversation(value: Any, name: str, spec) -> None:
    try:
        turns = check_turns(value, name, spec.min_chars)
    except TurnError as exc:
        raise _Rejected(exc.reason, exc.field, exc.detail) from None
    total = sum(len(t["content"]) for t in turns)
    if total > spec.max_chars:
        raise _Rejected("too_long", name, f"{total} characters in {len(turns)} turns > max_chars {spec.max_chars}")


def _field_text(value: Any) -> str:
    """A field as dedup compares it: a string normalized, a conversation as its rendered
    turns (role and normalized content), so the same words in other turns differ."""
    if isinstance(value, str):
        return normalize(value)
    return "\x1e".join(f"{t['role']}:{normalize(t['content'])}" for t in value)


def _field_chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(len(t["content"]) for t in value)
    return 0


def name_finder(config: DataValidationConfig):
    """The PERSON/ADDRESS detector, its NER model verified before any row is read."""
    from .names import NameFinder
    from .ner import NerConfirmer, resolve

    cfg = config.pii.names
    path, root = resolve(cfg.ner_model, cfg.ner_sha256)
    return NameFinder(NerConfirmer(path, cfg.ner_batch_size, root), cfg.allow)


def _finding_types(value: Any, counts: Counter | None = None) -> Counter:
    """Findings per PII type in a scanned record: what made a row too dense."""
    counts = Counter() if counts is None else counts
    if isinstance(value, _Redaction):
        counts.update(f.type for f in value.findings)
    elif isinstance(value, dict):
        for v in value.values():
            _finding_types(v, counts)
    elif isinstance(value, list):
        for v in value:
            _finding_types(v, counts)
    return counts


@dataclass
class ParsedBlock:
    """`Validator.parse_block`: the rows with their objects (`parse_lines`' tuples, a
    C-parsed one's text None) and the rejected (by index), the indexes of the rows C
    judged alone with its scan (`plain_rows.scan`), and every parsed row's index and
    dedup key, in line order (None without texts)."""

    parsed: list[tuple]
    rejected: dict[int, _Rejected]
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


def _loaded(lines: list[bytes], row: tuple) -> tuple:
    """A row C parsed, (index, None, format, None), with its object and values: C keeps
    no object, so one is loaded only for a row that a later step leaves to Python."""
    i, _, fmt, _ = row
    obj = orjson.loads(lines[i])
    return (i, obj, fmt, [obj[name] for name in fmt.fields])


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


@dataclass
class _Scan:
    obj: dict
    fmt: RecordFormat
    scanned: Any = None
    strings: list[str] = field(default_factory=list)
    n_findings: int = 0
    secret_field: str | None = None
    proposal: Any = None  # names.Proposal when names are on


@dataclass
class _Redaction:
    text: str
    findings: list


def _raw_field(raw: bytes) -> dict:
    try:
        return {"raw": raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {"raw_b64": base64.b64encode(raw).decode("ascii")}


def validate_local(
    input_path: str,
    outputs: OutputPaths,
    config: DataValidationConfig,
    reference_stats: str | None = None,
    show_progress: bool = True,
) -> ValidationResult:
    """The single-process engine (`engines.validate` chooses): validate `input_path` into
    `outputs`; never raises for bad rows, only for unusable input (InputError)."""
    inputs = input_files(input_path)
    compressed = False
    for path in inputs.files:  # every file refused or accepted before any work
        probe = open_input(path)
        probe.close()
        compressed |= probe.compressed
    reference = DataStats.load(reference_stats) if reference_stats else None
    validator = Validator(config, reference)
    out = Outputs(outputs, config.chunk_size)
    started = time.perf_counter()
    rows_in = rows_out = 0
    try:
        with out, long_lived_frozen():
            for path in inputs.files:
                if inputs.folder:
                    validator.lines.begin(inputs.name(path), rows_in + 1)
                src = open_input(path)
                try:
                    n_in, n_out = stream(
                        src, validator, out.clean, out.quarantine, config, show_progress, first_line=rows_in + 1
                    )
                finally:
                    src.close()
                rows_in, rows_out = rows_in + n_in, rows_out + n_out
    finally:
        validator.close()
    root = out.commit()
    elapsed = time.perf_counter() - started
    return finish(validator, config, inputs, compressed, outputs, rows_in, rows_out, root, out.clean.bytes, elapsed)


def stream(
    src: InputStream,
    validator: Validator,
    clean: _Sink,
    quarantine: _Sink,
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
        # (line, raw, outcome: clean bytes, _Scan or _Rejected); a run of clean rows is one entry
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

    def reject(self, rej: _Rejected, line_no: int, line: bytes, into: list[bytes]) -> None:
        """The quarantine line of a rejected row into `into` (the caller writes a block's
        at once: one write and one hash update instead of one a row)."""
        validator = self.validator
        validator.by_reason[rej.reason] += 1
        entry = {**validator.lines.where(line_no), "reason": rej.reason, "field": rej.field, "detail": rej.detail}
        entry.update(_raw_field(line))
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
            if type(outcome) is _Scan:
                self.doubtful += len(outcome.proposal.doubtful)
            self.pending.append((first + piece, self.block[piece], outcome))
            self.waiting += 1
            if self.doubtful >= self.batch or self.waiting >= _PENDING_ROWS:
                self.flush()

    def flush(self) -> None:
        """The waiting rows' names settled in one go; every waiting row written, in order."""
        validator = self.validator
        scans = [s.proposal for _, _, s in self.pending if type(s) is _Scan]
        settled = iter(validator.names.settle(scans))
        kept: list[bytes] = []
        rejected: list[bytes] = []
        for line_no, line, outcome in self.pending:
            if type(outcome) is bytes:
                kept.append(outcome)
                continue
            if type(outcome) is _Rejected:
                self.reject(outcome, line_no, line, rejected)
                continue
            try:
                kept.append(orjson.dumps(validator.complete(outcome, next(settled))) + b"\n")
            except _Rejected as rej:
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


def _quarantine_overlong(src: InputStream, quarantine: _Sink, at: dict, head: bytes, max_line: int) -> None:
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


@dataclass
class Totals:
    """What `finish` reads from a validator, summed over the shards of a sharded run."""

    reference: Any
    stats: Any
    by_reason: Counter
    pii_found: Counter
    pii_redacted: Counter
    rows_with_pii: int
    samples: list

    def add(self, part: dict) -> None:
        self.by_reason.update(part["by_reason"])
        self.pii_found.update(part["pii_found"])
        self.pii_redacted.update(part["pii_redacted"])
        self.rows_with_pii += part["rows_with_pii"]
        self.samples.extend(part["samples"][: 20 - len(self.samples)])
        for hist, counts in ((self.stats.length, part["length"]), (self.stats.pii_density, part["pii_density"])):
            hist.counts = [a + b for a, b in zip(hist.counts, counts, strict=False)]


def finish(
    v: Validator | Totals,
    config: DataValidationConfig,
    inputs: Inputs,
    compressed: bool,
    outputs: OutputPaths,
    rows_in: int,
    rows_out: int,
    root: str,
    clean_bytes: int,
    elapsed: float,
) -> ValidationResult:
    rows_q = rows_in - rows_out
    reject_rate = rows_q / rows_in if rows_in else 0.0
    checks = [
        gates.at_most("reject_rate", reject_rate, config.gate.max_reject_rate, f"quarantine rate {reject_rate:.1%}")
    ]
    psi = None
    if v.reference is not None and v.stats.rows:
        psi = drift(v.reference, v.stats)
        checks += [
            gates.at_most(f"psi_{name}", value, config.gate.max_psi, f"drift of {name}", "drift")
            for name, value in psi.items()
        ]
    else:
        checks.append(
            gates.Check("psi", None, f"<= {config.gate.max_psi:g}", "skipped", "no reference statistics", "drift")
        )
    checks.append(gates.at_least("rows_out", rows_out, 1, "no row passed validation" if rows_out == 0 else ""))
    gate_reasons = gates.failures(checks)
    metrics = {
        "rows_in": rows_in,
        "rows_out": rows_out,
        "rows_quarantined": rows_q,
        "reject_rate": reject_rate,
        "by_reason": dict(sorted(v.by_reason.items())),
        "pii_found": dict(sorted(v.pii_found.items())),
        "pii_redacted": dict(sorted(v.pii_redacted.items())),
        "rows_with_pii": v.rows_with_pii,
        "policy": config.pii.policy.value,
        "merkle_root": root,
        "chunk_size": config.chunk_size,
        "clean_bytes": clean_bytes,
        "input_bytes": inputs.size,
        "input_compressed": compressed,
        **({"input_files": len(inputs.files)} if inputs.folder else {}),
        "drift_psi": psi,
        "psi_threshold": config.gate.max_psi,
        "max_reject_rate": config.gate.max_reject_rate,
        "passed": not gate_reasons,
        "gate_reasons": gate_reasons,
        "checks": [c.to_json() for c in checks],
        "elapsed_s": round(elapsed, 3),
    }
    if outputs.stats:
        write_json(outputs.stats, v.stats.to_json())
    if outputs.metrics:
        write_json(outputs.metrics, metrics)
    return ValidationResult(metrics, not gate_reasons, gate_reasons, v.samples)


def write_json(path: str, data: dict) -> None:
    atomic.write_bytes(path, orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
