"""The block's plain rows in C (plain_rows.c): parsed, bounds-checked, normalized, keyed
and written back as orjson writes them, about 0.3 us a row instead of Python's 6.

The library (plain_rows.c, which includes pii_rows.c: candidate rows) is the package's
extension `_plain_rows`, compiled when the package is installed (setup.py), never at run
time, and run only when it was built from the C sources installed beside this module.
Without it the data stage says so in one line and stops, unless LLMOPS_PURE_PYTHON=1
asks for the Python path, whose outputs are the same (tests hold the two equal), about
3x slower."""

from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import os
import threading
import unicodedata
from typing import Any, NamedTuple

from kfp_llmops.components.common.errors import EnvironmentProblem

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCES = tuple(os.path.join(_HERE, name) for name in ("plain_rows.c", "pii_rows.c"))  # the first includes the second
EXTENSION = "_plain_rows"
_lock = threading.Lock()
_loaded: dict[str, object] = {}
DISABLE = "LLMOPS_PURE_PYTHON"  # set (to anything): the Python path, for comparisons


def extension_path() -> str | None:
    """The installed extension's file, or None (the package was built without it)."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(_HERE, EXTENSION + suffix)
        if os.path.exists(path):
            return path
    return None


def sources_digest() -> str | None:
    """The SHA-256 of the C sources installed beside this module (setup.py compiles the
    same digest into the library), or None where they are not installed."""
    digest = hashlib.sha256()
    try:
        for path in _SOURCES:
            with open(path, "rb") as handle:
                digest.update(handle.read())
    except OSError:
        return None
    return digest.hexdigest()


def load():
    """The C function, or None where `DISABLE` asks for the Python path."""
    return None if library() is None else _loaded["fn"]


def library():
    """The loaded extension, or None where `DISABLE` asks for the Python path. EnvironmentProblem,
    one line, where the package was installed without it or it was built from other
    sources than the ones beside it."""
    if os.environ.get(DISABLE):
        return None
    with _lock:
        if "lib" not in _loaded:
            _loaded["lib"] = _open()
            _loaded["fn"] = _loaded["lib"].plain_rows
            _loaded["blake2b_64"] = _loaded["lib"].blake2b_64
        return _loaded["lib"]


def _open():
    path = extension_path()
    if path is None:
        raise EnvironmentProblem(
            f"the data stage's C extension ({EXTENSION}) is not installed in {_HERE}: reinstall the package "
            f"where a C compiler is (pip install .), or set {DISABLE}=1 for the Python path (about 3x slower)"
        )
    lib = ctypes.CDLL(path)
    lib.plain_rows_sources.restype = ctypes.c_char_p
    lib.plain_rows_sources.argtypes = []
    built, beside = lib.plain_rows_sources().decode(), sources_digest()
    if beside is not None and built != beside:
        raise EnvironmentProblem(
            f"{path}: built from other sources than the plain_rows.c and pii_rows.c beside it; rebuild it "
            f"(pip install ., or make) or set {DISABLE}=1 for the Python path"
        )
    i64 = ctypes.c_int64
    lib.plain_rows.restype = i64
    lib.plain_rows.argtypes = [
        *[ctypes.c_char_p, i64],  # the block
        *[array("int64"), ctypes.c_char_p],  # formats: spec, field names
        *[array("int32"), array("int64"), array("uint64")],  # status, chars, keys
        *[array("uint8"), array("int64"), array("uint8")],  # out, offsets, scratch
    ]
    lib.plain_rows_unicode.restype = i64
    lib.plain_rows_unicode.argtypes = [array("uint32"), ctypes.c_char_p, i64]  # table, pool
    lib.blake2b_64.restype = ctypes.c_uint64
    lib.blake2b_64.argtypes = [ctypes.c_char_p, i64]
    return lib


def array(dtype: str):
    """A C function's array argument as ctypes checks it at every call: a one-dimensional,
    contiguous, aligned numpy array of exactly this element type, passed as its address
    (anything else raises ctypes.ArgumentError before C sees it). Not numpy's ndpointer,
    whose conversion leaves a reference cycle behind every call."""
    import numpy as np

    want = np.dtype(dtype)

    class Array:
        @staticmethod
        def from_param(value):
            if not (
                isinstance(value, np.ndarray)
                and value.dtype == want
                and value.ndim == 1
                and value.flags.c_contiguous
                and value.flags.aligned
            ):
                raise TypeError(f"a contiguous one-dimensional {want} array, not {_described(value)}")
            return ctypes.c_void_p(value.ctypes.data)

    Array.__name__ = f"{want}_array"
    return Array


def _described(value) -> str:
    if not hasattr(value, "shape"):
        return type(value).__name__
    return f"{type(value).__name__} of {getattr(value, 'dtype', '?')} shaped {value.shape}"


def blake2b_64(data: bytes) -> int:
    """The library's BLAKE2b-64 (tests compare it with hashlib's)."""
    if load() is None:
        raise RuntimeError("plain_rows library unavailable")
    return _loaded["blake2b_64"](data, len(data))


class Formats:
    """The validator's record formats as the C side reads them: per format whether all its
    fields are strings, and per field its name and character bounds, in order."""

    def __init__(self, formats):
        import numpy as np

        spec: list[int] = [len(formats)]
        names = bytearray()
        for fmt in formats:
            fields = list(fmt.fields.items())
            spec += [int(all(f.type == "string" for _, f in fields)), len(fields)]
            for name, field in fields:
                raw = name.encode("utf-8")
                spec += [len(names), len(raw), field.min_chars if field.type == "string" else 0]
                spec.append(min(field.max_chars, 2**62) if field.type == "string" else 0)
                names += raw
        self.spec = np.array(spec, dtype=np.int64)
        self.names = bytes(names) or b"\0"


def unicode_table():
    """Per BMP code point, what plain_rows.c may do with it (its `U_TABLE`), and the pool
    of normalized forms: (uint32 array, bytes).

    A character is the C side's when `dedup.normalize` of any text of such characters is
    the concatenation of each one's normalized form: neither it nor its NFKC form holds
    a combining mark (nonzero combining class) or a character that composes with the one
    before it (the second of a canonical pair, Hangul vowels and trailing consonants), so
    NFKC never reorders or composes across characters; neither is whitespace, so the
    runs to collapse and the ends to strip stay ASCII; and its form (NFKC, then case
    folded) is no longer in UTF-8 than the character. About 62,000 of the BMP's
    characters are (CJK, kana, Hangul syllables, most letters and punctuation); the
    rest send their line to Python. Built in about 70 ms, once a process, and only for
    data that is not ASCII."""
    import numpy as np

    seconds = set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))  # Hangul V and T jamo
    decomposed = {}
    for cp in range(0x80, 0x10000):
        d = unicodedata.decomposition(chr(cp))
        if d:
            decomposed[cp] = d
            parts = d.split()
            if len(parts) == 2 and not d.startswith("<"):
                seconds.add(int(parts[1], 16))
    table = np.zeros(0x10000, dtype=np.uint32)
    pool = bytearray()
    combining = unicodedata.combining
    for cp in range(0x80, 0x10000):
        if 0xD800 <= cp < 0xE000 or cp in seconds:
            continue
        ch = chr(cp)
        if ch.isspace() or combining(ch):
            continue
        form = ch
        if cp in decomposed:
            form = unicodedata.normalize("NFKC", ch)
            if any(combining(x) or ord(x) in seconds or x.isspace() for x in form):
                continue
        form = form.casefold()
        if form == ch:
            table[cp] = 1
            continue
        raw = form.encode("utf-8")
        if len(raw) > len(ch.encode("utf-8")) or any(x.isspace() for x in form):
            continue
        table[cp] = 1 | 2 | len(raw) << 2 | len(pool) << 8
        pool += raw
    return table, bytes(pool) or b"\0"


def _with_unicode(buf: bytes) -> None:
    """Give the library its `unicode_table` before the first block that may need it (built
    here, once a process, about 70 ms). The C side checks every entry first (a form no
    longer than its character, inside the pool) and refuses a table that is not so."""
    if "unicode" in _loaded or (buf.isascii() and b"\\u" not in buf):
        return
    with _lock:
        if "unicode" not in _loaded:
            table, pool = unicode_table()
            bad = _loaded["lib"].plain_rows_unicode(table, pool, len(pool))
            if bad >= 0:
                raise RuntimeError(f"plain_rows: the Unicode table built here is refused at U+{bad:04X}")
            _loaded["unicode"] = (table, pool)  # alive as long as the library reads them


class PlainScan(NamedTuple):
    """What C made of a block: the clean rows it wrote (`buf`, line i at
    `offsets[i]:offsets[i + 1]`), and per line its format (-1: left to Python), its
    characters and its dedup key."""

    buf: bytes
    status: Any
    chars: Any
    keys: Any
    offsets: Any


def scan(fn, lines: list[bytes], formats: Formats) -> PlainScan:
    """The block through C's `plain_rows` function `fn`."""
    import numpy as np

    buf = b"\n".join(lines)
    _with_unicode(buf)
    n = len(lines)
    status = np.empty(n, dtype=np.int32)
    chars = np.empty(n, dtype=np.int64)
    keys = np.empty(n, dtype=np.uint64)
    offsets = np.empty(n + 1, dtype=np.int64)
    out = np.empty(len(buf) + n + 1, dtype=np.uint8)
    scratch = np.empty(2 * (max(map(len, lines), default=0) + 1) + 16, dtype=np.uint8)
    got = fn(buf, len(buf), formats.spec, formats.names, status, chars, keys, out, offsets, scratch)
    if got != n:
        raise RuntimeError(f"plain_rows: {got} lines for {n}")
    return PlainScan(out[: offsets[n]].tobytes(), status, chars, keys, offsets)
