"""Names off, a block's plain candidate rows judged in C (pii_rows.c): `pii.find_pii` on
each value, then the density and secret verdicts, redaction and the clean row, as the
Python path judges them; about a microsecond a row instead of Python's 30.

Everything pii_rows.c needs to know about the recognizers comes from pii.py here: their
patterns compiled into matcher programs (regex_program.py), priorities, types, gates,
numeric fits and checksum tables; a JWT's header is decoded by pii.py too, before the
call, for every token head the lines hold. A row it cannot follow (a row to quarantine,
anything too large) it leaves to Python."""

from __future__ import annotations

import ctypes
import functools
import re
import threading
from dataclasses import dataclass

from . import pii, plain_rows
from .candidates import NAMES
from .regex_program import Program

# The order pii_rows.c's P_* names: the numeric run, the numeric recognizers, the negative
# context, email and the character before one, IPv6, IBAN, the secrets' anchor, secrets.
_PATTERNS = (
    (pii._NUMERIC_RUN, None),
    *((rec.pattern, rec) for rec in pii.NUMERIC),
    (pii._NEGATIVE_PREFIX, None),
    (pii._EMAIL.pattern, pii._EMAIL),
    (pii._EMAIL_LEFT, None),
    (pii._IPV6.pattern, pii._IPV6),
    (pii._IBAN.pattern, pii._IBAN),
    (pii._SECRET_ANCHOR, None),
    *((rec.pattern, rec) for rec in pii.SECRETS),
)
_VALIDATORS = {  # pii_rows.c's V_* in order
    pii._whole: 0,
    pii._group1: 1,
    pii._phone: 2,
    pii._card: 3,
    pii._ipv4: 4,
    pii._ipv6: 5,
    pii._iban: 6,
    pii._cn_id: 7,
    pii._ssn: 8,
    pii._jwt: 9,
    pii._bearer: 10,
}
TYPE_ID = {kind: i for i, kind in enumerate(pii.ALL_TYPES)}
_SECRET_BIT = len(pii.ALL_TYPES)
_GATES, _NEEDLES = 5, 5


@functools.lru_cache(maxsize=1024)
def kinds_mask(kinds: frozenset[str]) -> int:
    """A line's candidate families as pii_rows.c reads them (type bits, the secret bit)."""
    return sum(1 << (_SECRET_BIT if k == pii.SECRET else TYPE_ID[k]) for k in kinds if k != NAMES)


@dataclass(frozen=True)
class Tables:
    code: object  # int32 array
    sets: bytes
    conf: object  # int32 array
    needles: bytes


def _tables() -> Tables:
    import numpy as np

    program = Program()
    for pattern, _ in _PATTERNS:
        program.add(pattern)
    conf: list[int] = [*program.entries, *program.firsts]
    recs = [rec for _, rec in _PATTERNS]
    conf += [TYPE_ID[rec.type] if rec else 0 for rec in recs]
    conf += [rec.priority if rec else 0 for rec in recs]
    conf += [_VALIDATORS[rec.validate] if rec else 0 for rec in recs]
    for fit in pii.NUMERIC_FITS:
        chars = [ord(c) for c in fit.one_of] + [0, 0]
        if len(fit.one_of) > 2:
            raise ValueError("a numeric fit names at most two characters")
        conf += [fit.digits, chars[0], chars[1], fit.dots]
    conf.append(kinds_mask(pii.NUMERIC_TYPES))
    conf.append(sum(1 << TYPE_ID[k] for k in pii.SECRET_TYPES))
    conf += [TYPE_ID[pii.EMAIL], TYPE_ID[pii.IPV6], TYPE_ID[pii.IBAN]]
    needles = bytearray()
    for rec in pii.SECRETS:
        if len(rec.gate) > _NEEDLES:
            raise ValueError(f"{rec.type}: at most {_NEEDLES} gate strings")
        pairs = []
        for needle in rec.gate:
            pairs += [len(needles), len(needle)]
            needles += needle.encode("ascii")
        conf += pairs + [0, 0] * (_NEEDLES - len(rec.gate))
    for kind in pii.ALL_TYPES:  # the redaction tokens, in type-id order, among the needles
        token = pii.TOKENS[kind].encode("ascii")
        conf += [len(needles), len(token)]
        needles += token
    letters = [chr(65 + i) for i in range(26)]
    conf += [pii.IBAN_LENGTHS.get(a + b, 0) for a in letters for b in letters]
    conf += list(pii._GB11643_WEIGHTS)
    check = b"10X98765432\0"
    conf += [int.from_bytes(check[i : i + 4], "little") for i in range(0, 12, 4)]
    return Tables(
        np.array(program.code, dtype=np.int32),
        b"".join(program.sets),
        np.array(conf, dtype=np.int32),
        bytes(needles) or b"\0",
    )


_lock = threading.Lock()
_loaded: dict[str, object] = {}


def load():
    """(the library, its tables), or None where plain_rows.load() is None."""
    with _lock:
        if "lib" not in _loaded:
            lib = plain_rows.library()
            _loaded["lib"] = None if lib is None else (_declare(lib), _tables())
        return _loaded["lib"]


def _declare(lib):
    """pii_rows.c's entry points with their argument types (arrays as `plain_rows.array`)."""
    i32, i64, text, jwt = ctypes.c_int32, ctypes.c_int64, ctypes.c_char_p, ctypes.POINTER(_Jwt)
    a = plain_rows.array
    tables = [a("int32"), text, a("int32"), text]  # code, sets, conf, needles
    lib.pii_find.restype = i64
    lib.pii_find.argtypes = [text, i64, i32, *tables, jwt, a("int32"), a("uint8"), i64]
    lib.regex_search.restype = i32
    lib.regex_search.argtypes = [a("int32"), text, i32, i32, text, i32, i32, a("int32"), a("uint8"), i64]
    lib.pii_rows.restype = i64
    lib.pii_rows.argtypes = [
        *[text, i64],  # the lines
        *[a("int64"), text, a("int32")],  # formats (spec, names), kinds
        *[*tables, jwt],  # the recognizers' tables, the JWT headers' verdicts
        *[i32, i32, ctypes.c_double],  # redact, quarantine, max density
        *[a("int32"), a("int64"), a("float64")],  # per line: status, chars, density
        *[a("int64"), a("int64")],  # per type: found, redacted
        *[a("uint8"), i64, a("int64")],  # out, its size, offsets
        *[a("uint8"), a("uint8"), i64],  # scratch, stack, its size
    ]
    return lib


_STACK = 1 << 16  # backtracking entries (16 bytes each); a row that needs more is Python's


class _Jwt(ctypes.Structure):
    """pii_rows.c's jwt_t: token heads (sorted) and pii's verdict on each one's header."""

    _fields_ = [
        ("heads", ctypes.c_char_p),
        ("offsets", ctypes.POINTER(ctypes.c_int64)),
        ("ok", ctypes.c_char_p),
        ("n", ctypes.c_int64),
    ]


_HEAD = re.compile(rb"eyJ[A-Za-z0-9_-]{8,}")  # a JWT match's text up to its first '.'


def jwt_verdicts(data: bytes) -> tuple[_Jwt, tuple]:
    """The verdict of `pii._jwt_header_ok` on every head a JWT match in `data` can have,
    for pii_rows.c (which declines a head it was not given). A match starts at an `eyJ`
    and its head runs to the first '.', over the characters `_HEAD` takes: from each
    `eyJ`, the longest such run is the only head a match there can have. A JSON line
    holds a token's characters as they are (none of them is escaped but through \\u,
    which makes the line Python's). The tuple keeps the buffers alive."""
    import numpy as np

    heads = set()
    at = data.find(b"eyJ")
    while at >= 0:
        m = _HEAD.match(data, at)
        if m:
            heads.add(m.group())
        at = data.find(b"eyJ", at + 1)
    ordered = sorted(heads)
    joined = b"".join(ordered)
    offsets = np.zeros(len(ordered) + 1, dtype=np.int64)
    np.cumsum([len(h) for h in ordered], out=offsets[1:])
    ok = bytes(pii._jwt_header_ok(h.decode("ascii")) for h in ordered)
    jwt = _Jwt(joined, (ctypes.c_int64 * len(offsets)).from_buffer(offsets), ok, len(ordered))
    return jwt, (joined, offsets, ok)


def find(text: str, kinds: frozenset[str] | None) -> list[pii.Finding] | None:
    """`pii.find_pii(text, kinds)` in C, or None where it declines (tests compare them)."""
    import numpy as np

    lib, t = load()
    raw = text.encode("ascii")
    mask = (1 << (_SECRET_BIT + 1)) - 1 if kinds is None else kinds_mask(kinds)
    out = np.zeros(3 * 256, dtype=np.int32)
    stack = np.empty(_STACK * 16, dtype=np.uint8)
    jwt, _keep = jwt_verdicts(raw)
    n = lib.pii_find(raw, len(raw), mask, t.code, t.sets, t.conf, t.needles, ctypes.byref(jwt), out, stack, len(stack))
    if n < 0:
        return None
    got = out.tolist()
    return [pii.Finding(got[3 * i], got[3 * i + 1], pii.ALL_TYPES[got[3 * i + 2]]) for i in range(n)]


def regex_search(pattern, text: str, pos: int = 0, endpos: int | None = None) -> tuple | None:
    """`pattern.search(text, pos, endpos)` by the C matcher: (span, groups 1..3 spans), None
    for no match (tests compare it with `re`)."""
    import numpy as np

    lib, _ = load()
    program = Program()
    entry = program.add(pattern)
    raw = text.encode("ascii")
    caps = np.zeros(8, dtype=np.int32)
    stack = np.empty(_STACK * 16, dtype=np.uint8)
    end = len(raw) if endpos is None else min(endpos, len(raw))
    code = np.array(program.code, dtype=np.int32)
    sets, first = b"".join(program.sets), program.firsts[0]
    got = lib.regex_search(code, sets, entry, first, raw, end, pos, caps, stack, len(stack))
    if got == -2:
        raise RuntimeError("out of backtracking stack")
    if got < 0:
        return None
    spans = caps.tolist()
    return (spans[0], spans[1]), tuple((spans[2 * g], spans[2 * g + 1]) for g in range(1, 4))


@dataclass
class Judged:
    """pii_rows over some lines: per line whether C judged it, its clean row (sliced by
    `offsets`), characters and density; finding and redaction counts per type; rows with PII."""

    done: object  # numpy bool array
    rows: bytes
    offsets: object
    chars: object
    density: object
    found: dict[str, int]
    redacted: dict[str, int]
    rows_with_pii: int


def judge(lines: list[bytes], masks: list[int], formats, redact: frozenset[str], quarantine: bool, max_density: float):
    """Judge `lines` (plain rows, candidate families `masks`: `kinds_mask`) in C."""
    import numpy as np

    lib, t = load()
    buf = b"\n".join(lines)
    jwt, _keep = jwt_verdicts(buf)
    n = len(lines)
    kinds = np.array(masks, dtype=np.int32)
    status = np.zeros(n, dtype=np.int32)
    chars = np.zeros(n, dtype=np.int64)
    density = np.zeros(n, dtype=np.float64)
    found = np.zeros(len(pii.ALL_TYPES) + 1, dtype=np.int64)
    redacted = np.zeros(len(pii.ALL_TYPES) + 1, dtype=np.int64)
    out = np.empty(4 * len(buf) + 64 * n + 4096, dtype=np.uint8)
    offsets = np.empty(n + 1, dtype=np.int64)
    scratch = np.empty(2 * (max(map(len, lines), default=0) + 1) + 16, dtype=np.uint8)
    stack = np.empty(_STACK * 16, dtype=np.uint8)
    redact_bits = sum(1 << TYPE_ID[k] for k in redact)
    got = lib.pii_rows(
        *(buf, len(buf), formats.spec, formats.names, kinds, t.code, t.sets, t.conf, t.needles, ctypes.byref(jwt)),
        *(redact_bits, int(quarantine), max_density, status, chars, density, found, redacted),
        *(out, len(out), offsets, scratch, stack, len(stack)),
    )
    if got != n:
        raise RuntimeError(f"pii_rows: {got} lines for {n}")
    counts = found[:-1].tolist()
    return Judged(
        status.astype(bool),
        out[: offsets[n]].tobytes(),
        offsets,
        chars,
        density,
        {k: c for k, c in zip(pii.ALL_TYPES, counts, strict=True) if c},
        {k: c for k, c in zip(pii.ALL_TYPES, redacted[:-1].tolist(), strict=True) if c},
        int(found[-1]),
    )
