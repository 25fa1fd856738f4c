"""Which raw JSON lines may hold a pattern finding, and of which families: one Hyperscan
database over a block of lines.

`pii.find_pii` costs about 10 us per string in Python; most records hold no PII, and
Hyperscan rules them out at gigabytes per second. Each expression below is a
lookaround-free superset of what one recognizer family (or its gate) can match in a
decoded string, so a line none of them matches holds no finding and its strings skip
`find_pii`, and a family none of whose expressions matches a line finds nothing in any
of its strings, so `find_pii` skips that family's scans there: the outputs do not
change. The supersets hold on the raw line because JSON never escapes the characters
they use, except through `\\u00XX`, which is itself a candidate (of every family).

Names on, one more family, `NAMES` (`names.LINE_CANDIDATE`), says which lines the name
finder can find anything in: the others skip its candidate pass.
"""

from __future__ import annotations

import functools
import threading

from kfp_llmops.components.data_validation import names, pii

ESCAPE = "ESCAPE"  # on a raw line: any character may hide behind it
NAMES = "NAMES"  # the name finder's candidates (names on)
CANDIDATES: tuple[tuple[str, str], ...] = (
    # A card's first twelve digits after the character before its run (a digit run in
    # a raw line starts after a non-digit, or where the data does): one match a run
    # instead of one at each of its digits past the twelfth.
    (pii.CREDIT_CARD, r"(?:^|[^0-9])(?:[0-9][ -]?){11}[0-9]"),
    (
        pii.CN_RESIDENT_ID,
        r"[1-8][0-9]{5}(?:18|19|20)[0-9]{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])"
        r"[0-9]{3}[0-9Xx]",
    ),
    (pii.US_SSN, r"[0-9]{3}[- ][0-9]{2}[- ][0-9]{4}"),
    (pii.PHONE, r"\+[1-9][0-9]{0,2}[ .-]?\(?[0-9]"),  # international: its start
    (pii.PHONE, r"(?:\([2-9][0-9]{2}\) ?|[2-9][0-9]{2}[ .-])[2-9][0-9]{2}[ .-][0-9]{4}"),  # US
    (pii.PHONE, r"1[3-9][0-9][ -]?[0-9]{4}[ -]?[0-9]{4}|0[0-9]{2,3}-[0-9]{7}"),  # CN
    (pii.IPV4, r"(?:[0-9]{1,3}\.){3}[0-9]"),
    (pii.IPV6, r"::|[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{1,4}){7}"),  # what IPv6Address accepts: "::" or 8 groups
    (pii.EMAIL, r"[A-Za-z0-9._%+-]@[A-Za-z0-9][A-Za-z0-9-]*\.[A-Za-z0-9]"),
    (pii.IBAN, r"[A-Z]{2}[0-9]{2} ?[A-Z0-9]"),
    (pii.SECRET, pii.SECRET_ANCHOR),  # the secrets' own gate
    (ESCAPE, r"\\u00[0-7][0-9A-Fa-f]"),  # an escaped ASCII character
)

_local = threading.local()


_WITH_NAMES = (*CANDIDATES, (NAMES, names.LINE_CANDIDATE))


def _database(with_names: bool):
    families, slot = (_WITH_NAMES, NAMES) if with_names else (CANDIDATES, "db")
    db = getattr(_local, slot, None)
    if db is None:
        import hyperscan

        expressions = [pattern.encode("ascii") for _, pattern in families]
        db = hyperscan.Database()
        db.compile(expressions=expressions, ids=list(range(len(expressions))), elements=len(expressions))
        setattr(_local, slot, db)
    return db, families


Kinds = frozenset[str] | None  # the families that may match; None: any may (an escape)
NONE: frozenset[str] = frozenset()


def candidate_lines(lines: list[bytes], with_names: bool = False) -> dict[int, Kinds]:
    """The indexes of `lines` (newlines removed) a candidate matches, with their families
    (`NAMES` among them with `with_names`), from one scan of them joined: every match's
    end is reported and mapped to its line. A match that spans the joining newline gives
    a line a family it need not have, which only costs a scan; none that a line has is
    ever left out."""
    import numpy as np

    ends: list[int] = []
    ids: list[int] = []
    db, families = _database(with_names)
    db.scan(
        b"\n".join(lines),
        match_event_handler=lambda i, _start, end, _flags, _ctx: ends.append(end) or ids.append(i),
    )
    if not ends:
        return {}
    bounds = np.cumsum(np.fromiter(map(len, lines), dtype=np.int64, count=len(lines)) + 1)
    at = np.searchsorted(bounds, np.array(ends, dtype=np.int64) - 1, side="right")
    # Each (line, expression) once, then a line's mask as the sum of its distinct bits.
    pairs = np.unique(at * 64 + np.array(ids, dtype=np.int64))
    masks = np.bincount(pairs >> 6, weights=np.left_shift(1, pairs & 63), minlength=len(lines)).astype(np.int64)
    found = np.flatnonzero(masks)
    kinds = _kinds_of(families)
    return dict(zip(found.tolist(), map(kinds, masks[found].tolist()), strict=True))


@functools.cache
def _kinds_of(families: tuple[tuple[str, str], ...]):
    """mask of expression ids -> the line's `Kinds` (None with an escape), one set a mask."""

    @functools.cache
    def kinds(mask: int) -> Kinds:
        found = frozenset(families[i][0] for i in range(len(families)) if mask >> i & 1)
        return None if ESCAPE in found else found

    return kinds


def line_kinds(raw: bytes) -> Kinds:
    """`candidate_lines` of one line: NONE when no candidate matches it."""
    ids: set[int] = set()
    _database(False)[0].scan(raw, match_event_handler=lambda i, _start, _end, _flags, _ctx: ids.add(i))
    if not ids:
        return NONE
    kinds = {CANDIDATES[i][0] for i in ids}
    return None if ESCAPE in kinds else frozenset(kinds)
