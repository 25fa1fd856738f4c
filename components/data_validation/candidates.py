"""Which raw JSON lines may hold a pattern finding: one Hyperscan database over the line.

`pii.find_pii` costs about 10 us per string in Python; most records hold no PII, and
Hyperscan rules them out at gigabytes per second. Each expression below is a
lookaround-free superset of what one recognizer (or its gate) can match in a decoded
string, so a line none of them matches holds no finding and its strings skip
`find_pii`; a line one of them matches is scanned exactly as before, so the outputs do
not change. The supersets hold on the raw line because JSON never escapes the
characters they use, except through `\\u00XX`, which is itself a candidate.
"""

from __future__ import annotations

import threading

from kfp_llmops.components.data_validation import pii

CANDIDATES: tuple[tuple[str, str], ...] = (
    (pii.CREDIT_CARD, r"(?:[0-9][ -]?){11,18}[0-9]"),
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
    (pii.IPV6, r":[0-9A-Fa-f]{0,4}:"),  # two colons of a group
    (pii.EMAIL, r"[A-Za-z0-9._%+-]@[A-Za-z0-9][A-Za-z0-9-]*\.[A-Za-z0-9]"),
    (pii.IBAN, r"[A-Z]{2}[0-9]{2} ?[A-Z0-9]"),
    ("SECRET", pii.SECRET_ANCHOR),  # the secrets' own gate
    ("ESCAPE", r"\\u00[0-7][0-9A-Fa-f]"),  # an escaped ASCII character
)

_local = threading.local()


def _database():
    db = getattr(_local, "db", None)
    if db is None:
        import hyperscan

        expressions = [pattern.encode("ascii") for _, pattern in CANDIDATES]
        db = hyperscan.Database()
        db.compile(
            expressions=expressions,
            ids=list(range(len(expressions))),
            elements=len(expressions),
            flags=[hyperscan.HS_FLAG_SINGLEMATCH] * len(expressions),
        )
        _local.db, _local.stop = db, hyperscan.ScanTerminated
    return db


def _stop(*_args) -> bool:
    return True  # the first match ends the scan


def may_hold_pii(raw: bytes) -> bool:
    """False only when no recognizer can find anything in any string of this JSON line."""
    db = _database()
    try:
        db.scan(raw, match_event_handler=_stop)
    except _local.stop:
        return True
    return False
