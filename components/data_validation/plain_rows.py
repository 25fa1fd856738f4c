"""The block's plain rows in C (plain_rows.c): parsed, bounds-checked, normalized, keyed
and written back as orjson writes them, about 0.3 us a row instead of Python's 6.

The library (plain_rows.c, which includes pii_rows.c: candidate rows) is built once
with the system C compiler (`cc`) into a cache folder, named by the sources' hash, or
found prebuilt beside this module (the data image builds it there:
`python plain_rows.py DIR`; this file imports nothing outside the standard library
until it scans).
Where neither is possible, `load()` answers None and the validator runs its Python path,
whose outputs are the same (tests hold the two equal)."""

from __future__ import annotations

import ctypes
import hashlib
import os
import stat
import subprocess
import sys
import tempfile
import threading
import unicodedata
from typing import Any, NamedTuple

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCES = tuple(os.path.join(_HERE, name) for name in ("plain_rows.c", "pii_rows.c"))  # the first includes the second
_FLAGS = ["-O2", "-shared", "-fPIC", "-std=c99"]
_lock = threading.Lock()
_loaded: dict[str, object] = {}
DISABLE = "LLMOPS_PURE_PYTHON"  # set (to anything): the Python path, for comparisons


def _named(prefix: str, seed: str, files, suffix: str) -> str:
    """A cached file's name: `prefix`, a hash of `seed` and of what `files` hold, `suffix`."""
    digest = hashlib.sha256(seed.encode())
    for path in files:
        with open(path, "rb") as handle:
            digest.update(handle.read())
    return f"{prefix}-{digest.hexdigest()[:16]}{suffix}"


def _library_name() -> str:
    return _named("plain_rows", " ".join(_FLAGS), _SOURCES, ".so")


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _record(path: str, digest: str) -> None:
    """`path`'s SHA-256 beside it (`.sha256`), written atomically: what was built there."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".sha256")
    with os.fdopen(fd, "w") as handle:
        handle.write(digest + "\n")
    os.replace(tmp, path + ".sha256")


def _recorded(path: str, data: bytes | None = None) -> bool:
    """Whether `path` (or `data`, its bytes already read) holds what was recorded when it
    was built (a planted, torn or replaced file does not, and one without a record is not
    trusted)."""
    try:
        with open(path + ".sha256", encoding="ascii") as handle:
            digest = hashlib.sha256(data).hexdigest() if data is not None else _sha256(path)
            return handle.read().strip() == digest
    except (OSError, UnicodeDecodeError):
        return False


def private_folder(path: str) -> str:
    """`path` as a folder only this user can write (made 0700, tightened if looser);
    OSError for one that is a link or another user's: code is never loaded from it."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise OSError(f"{path}: not a folder of this user's; nothing is loaded from it")
    if info.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def build(folder: str) -> str:
    """Compile the library into `folder` (atomically, its SHA-256 recorded beside it); its
    path. Raises when `cc` fails."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, _library_name())
    if not (os.path.exists(path) and _recorded(path)):
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".so")
        os.close(fd)
        try:
            subprocess.run(
                [os.environ.get("CC", "cc"), *_FLAGS, "-o", tmp, _SOURCES[0]],
                check=True,
                capture_output=True,
                text=True,
            )
            digest = _sha256(tmp)
            os.replace(tmp, path)
            _record(path, digest)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return path


def _cache_folder() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kfp-llmops")


def _library() -> str:
    """Its path: prebuilt beside this module when it is what was built there, else built
    (again, should the copy there not be what was recorded) into this user's cache folder."""
    beside = os.path.join(_HERE, _library_name())
    if os.path.exists(beside) and _recorded(beside):
        return beside
    return build(private_folder(_cache_folder()))


def load():
    """The ctypes function, or None (no compiler, a failed build, or `DISABLE` set)."""
    return None if library() is None else _loaded["fn"]


def library():
    """The loaded library, or None (no compiler, a failed build, or `DISABLE` set)."""
    if os.environ.get(DISABLE):
        return None
    with _lock:
        if "fn" not in _loaded:
            try:
                lib = ctypes.CDLL(_library())
            except (OSError, subprocess.CalledProcessError) as exc:
                print(f"[validate] plain rows in C unavailable ({_short(exc)}): the Python path", file=sys.stderr)
                lib = None
            if lib is not None:
                lib.plain_rows.restype = ctypes.c_int64
                lib.plain_rows.argtypes = [ctypes.c_char_p, ctypes.c_int64] + [ctypes.c_void_p] * 8
                lib.plain_rows_unicode.restype = ctypes.c_int64
                lib.plain_rows_unicode.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64]
                lib.blake2b_64.restype = ctypes.c_uint64
                lib.blake2b_64.argtypes = [ctypes.c_char_p, ctypes.c_int64]
                _loaded["blake2b_64"] = lib.blake2b_64
            _loaded["fn"] = None if lib is None else lib.plain_rows
            _loaded["lib"] = lib
        return _loaded["lib"]


def _short(exc: Exception) -> str:
    text = getattr(exc, "stderr", None) or str(exc)
    return text.strip().splitlines()[-1][:200] if text.strip() else type(exc).__name__


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
    rest send their line to Python. Built in about 70 ms, once, and only for data that
    is not ASCII."""
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


def _table_name() -> str:
    """The cached table's file name: this Python's Unicode version and this file's code."""
    return _named("unicode", unicodedata.unidata_version, [os.path.abspath(__file__)], ".bin")


def cached_unicode_table():
    """`unicode_table`, read from beside this module (the data image writes it there) or
    from this user's cache folder when it is what was recorded there, else built and
    written there (atomically) for later processes: reading it costs well under a
    millisecond, building it about 70 ms."""
    import numpy as np

    name = _table_name()
    for folder in (_HERE, _cache_folder()):
        path = os.path.join(folder, name)
        try:
            raw = open(path, "rb").read()  # noqa: SIM115 - read whole
        except OSError:
            continue
        if _recorded(path, raw) and len(raw) > 4 * 0x10000:
            return np.frombuffer(raw[: 4 * 0x10000], dtype="<u4").astype(np.uint32), raw[4 * 0x10000 :]
    table, pool = unicode_table()
    try:
        write_unicode_table(private_folder(_cache_folder()), table, pool)
    except OSError:
        pass  # built each time instead
    return table, pool


def write_unicode_table(folder: str, table=None, pool: bytes | None = None) -> str | None:
    """Write `unicode_table` into `folder` (atomically, its SHA-256 recorded beside it);
    its path, None where not writable."""
    if table is None:
        table, pool = unicode_table()
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".bin")
        data = table.astype("<u4").tobytes() + pool
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        path = os.path.join(folder, _table_name())
        os.replace(tmp, path)
        _record(path, hashlib.sha256(data).hexdigest())
        return path
    except OSError:
        return None


def _with_unicode(buf: bytes) -> None:
    """Give the library its `unicode_table` before the first block that may need it. The
    C side checks every entry first (a form no longer than its character, inside the
    pool) and refuses a table that is not so; this one is then built afresh."""
    if "unicode" in _loaded or (buf.isascii() and b"\\u" not in buf):
        return
    with _lock:
        if "unicode" not in _loaded:
            table, pool = cached_unicode_table()
            bad = _loaded["lib"].plain_rows_unicode(table.ctypes.data, pool, len(pool))
            if bad >= 0:
                print(f"[validate] Unicode table refused at U+{bad:04X}: built afresh", file=sys.stderr)
                table, pool = unicode_table()
                bad = _loaded["lib"].plain_rows_unicode(table.ctypes.data, pool, len(pool))
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
    got = fn(
        buf,
        len(buf),
        formats.spec.ctypes.data,
        formats.names,
        status.ctypes.data,
        chars.ctypes.data,
        keys.ctypes.data,
        out.ctypes.data,
        offsets.ctypes.data,
        scratch.ctypes.data,
    )
    if got != n:
        raise RuntimeError(f"plain_rows: {got} lines for {n}")
    return PlainScan(out[: offsets[n]].tobytes(), status, chars, keys, offsets)


if __name__ == "__main__":
    print(build(sys.argv[1]))
