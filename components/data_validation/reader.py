"""Opening the input: a plain or gzip JSONL file, or a folder of them (part files, as
Spark, Ray Data or `split` write them) read as one stream in name order; refused early
when it cannot be data at all (missing, unreadable, empty, mostly binary, a folder with
other files). Lines are then read in bounded pieces, so neither a 2 GB file nor a 2 GB
line is ever held whole."""

from __future__ import annotations

import bisect
import functools
import gzip
import io
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from kfp_llmops.components.common.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
_PROBE = 64 * 1024
BUFFER = 1 << 20  # the reader's buffer: `whole_lines` takes the whole lines it holds at once
PEEK = True  # False: one `readline` a line (the tests compare the two)
# A file is refused as binary only when this share of its first bytes are control bytes
# (NUL and other C0 codes but tab, newline, carriage return): one bad line in a large
# dataset is quarantined with its line number like any other malformed line.
BINARY_SHARE = 0.10
_CONTROL = bytes(b for b in range(32) if b not in (9, 10, 13))
STREAM_ERRORS = (OSError, EOFError, zlib.error)
DATA_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".json", ".json.gz")


@dataclass(frozen=True)
class Inputs:
    """What an input path holds: one file, or a folder's data files in name order."""

    path: str
    files: tuple[str, ...]
    folder: bool

    def name(self, file: str) -> str:
        return os.path.relpath(file, self.path) if self.folder else os.path.basename(file)

    @functools.cached_property
    def size(self) -> int:
        """Bytes in all (stat'ed once: a folder may hold thousands of parts)."""
        return sum(os.path.getsize(f) for f in self.files)


def input_files(path: str) -> Inputs:
    """`path` as a list of files. In a folder, names starting with "." or "_" are skipped
    (_SUCCESS, .crc, hidden files) and so are empty files; any other file must be named
    as data (DATA_SUFFIXES), so nothing is silently left out."""
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file or folder")
    if not os.path.isdir(path):
        return Inputs(path, (path,), False)
    files = []
    for folder, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        for name in sorted(names):
            full = os.path.join(folder, name)
            if name.startswith((".", "_")) or os.path.getsize(full) == 0:
                continue
            if not name.endswith(DATA_SUFFIXES):
                raise InputError(
                    f"{full}: not a data file in the input folder (expected "
                    f"{', '.join(DATA_SUFFIXES)}); move it out or rename it"
                )
            files.append(full)
    if not files:
        raise InputError(f"{path}: the folder holds no data files ({', '.join(DATA_SUFFIXES)})")
    return Inputs(path, tuple(sorted(files, key=lambda f: os.path.relpath(f, path))), True)


class Lines:
    """Line numbers count over the input's files as one stream; this says where one is:
    its file and its line there (a single file's numbers are its own, unnamed)."""

    def __init__(self):
        self.names: list[str] = []
        self.starts: list[int] = []
        self._firsts = {1}

    def begin(self, name: str, first_line: int) -> None:
        """File `name` starts at `first_line`."""
        self.names.append(name)
        self.starts.append(first_line)
        self._firsts.add(first_line)

    def is_first(self, line: int) -> bool:
        return line in self._firsts

    @property
    def firsts(self) -> frozenset[int]:
        """The lines that open a file (and so may start with a BOM)."""
        return frozenset(self._firsts)

    def where(self, line: int) -> dict:
        """{"line": n}, with "file" first when the input is a folder."""
        if not self.names:
            return {"line": line}
        i = bisect.bisect_right(self.starts, line) - 1
        return {"file": self.names[i], "line": line - self.starts[i] + 1}

    def cite(self, line: int) -> str:
        at = self.where(line)
        return f"{at['file']} line {at['line']}" if "file" in at else f"line {line}"


@dataclass
class InputStream:
    path: str
    raw: BinaryIO  # the file on disk (its position drives the progress bar)
    reader: io.BufferedReader
    compressed: bool
    size: int

    def position(self) -> int:
        try:
            return self.raw.tell()
        except (OSError, ValueError):
            return 0

    def close(self) -> None:
        self.reader.close()
        self.raw.close()


def open_input(path: str) -> InputStream:
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a folder, expected a JSONL file")
    try:
        raw = open(path, "rb", buffering=0)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    size = os.fstat(raw.fileno()).st_size
    compressed = raw.read(2) == GZIP_MAGIC
    raw.seek(0)
    stream: BinaryIO = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
    reader = io.BufferedReader(stream, buffer_size=BUFFER)
    try:
        head = reader.peek(_PROBE)[:_PROBE]
    except STREAM_ERRORS as exc:
        raw.close()
        raise InputError(f"{path}: not a readable gzip stream: {exc}") from None
    if not head:
        raw.close()
        raise InputError(f"{path}: empty file" + (" (after gzip decompression)" if compressed else ""))
    control = len(head) - len(head.translate(None, _CONTROL))
    if control > BINARY_SHARE * len(head):
        raw.close()
        first = next(i for i, byte in enumerate(head) if byte in _CONTROL)
        raise InputError(
            f"{path}: binary data ({control:,} of the first {len(head):,} bytes are control bytes, "
            f"the first at offset {first}); expected UTF-8 JSONL"
        )
    return InputStream(path, raw, reader, compressed, size)


@dataclass
class Overlong:
    """A line longer than `max_line`: its first `max_line + 1` bytes; the caller reads the
    rest (`rest_of_line`) before asking `whole_lines` for more."""

    head: bytes


def whole_lines(src, max_line: int, after: int = 0) -> Iterator[list[bytes] | Overlong]:
    """The lines of `src` (an `InputStream`, or anything with its `path` and a `reader`
    with `peek`, `read` and `readline`), newlines removed, in lists: the whole lines its
    reader holds already (up to its buffer) in one piece, a line the buffer cuts through
    `readline(max_line + 1)`, a longer one as `Overlong`, so no line is held whole past
    `max_line` bytes. A broken stream is an InputError naming the file and the last line
    read (numbered from `after`)."""
    reader = src.reader
    done = after
    while True:
        try:
            buffered = reader.peek() if PEEK else b""
            cut = buffered.rfind(b"\n")
            if cut >= 0:
                lines = buffered[:cut].split(b"\n")
                if cut > max_line and max(map(len, lines)) > max_line:
                    lines = lines[: next(k for k, x in enumerate(lines) if len(x) > max_line)]
                if lines:
                    reader.read(sum(map(len, lines)) + len(lines))
                    done += len(lines)
                    yield lines
                    continue
            line = reader.readline(max_line + 1)
        except STREAM_ERRORS as exc:
            raise InputError(f"{src.path}: input stream broken after line {done}: {exc}") from None
        if not line:
            return
        done += 1
        if line.endswith(b"\n"):
            yield [line[:-1]]
        elif len(line) > max_line:
            yield Overlong(line)
        else:
            yield [line]  # the last line, without a newline


def rest_of_line(readline, max_line: int):
    """The pieces of an over-long line after its first, its newline dropped: read in
    `max_line + 1` pieces so no line is ever held whole."""
    while True:
        piece = readline(max_line + 1)
        if not piece or piece.endswith(b"\n"):
            yield piece[:-1] if piece.endswith(b"\n") else piece
            return
        yield piece
