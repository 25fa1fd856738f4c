"""Opening the input: plain or gzip JSONL, refused early when it cannot be data at all
(missing, a directory, unreadable, empty, mostly binary). Lines are then read in bounded pieces,
so neither a 2 GB file nor a 2 GB line is ever held whole."""
from __future__ import annotations

import gzip
import io
import os
import zlib
from dataclasses import dataclass
from typing import BinaryIO

from kfp_llmops.components.common.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
_PROBE = 64 * 1024
# A file is refused as binary only when this share of its first bytes are control bytes
# (NUL and other C0 codes but tab, newline, carriage return): one bad line in a large
# dataset is quarantined with its line number like any other malformed line.
BINARY_SHARE = 0.10
_CONTROL = bytes(b for b in range(32) if b not in (9, 10, 13))
STREAM_ERRORS = (OSError, EOFError, zlib.error)


@dataclass
class InputStream:
    path: str
    raw: BinaryIO            # the file on disk (its position drives the progress bar)
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
        raise InputError(f"{path}: is a directory, expected a JSONL file")
    try:
        raw = open(path, "rb", buffering=0)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    size = os.fstat(raw.fileno()).st_size
    compressed = raw.read(2) == GZIP_MAGIC
    raw.seek(0)
    stream: BinaryIO = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
    reader = io.BufferedReader(stream, buffer_size=1 << 20)
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
        raise InputError(f"{path}: binary data ({control:,} of the first {len(head):,} bytes are control bytes, "
                         f"the first at offset {first}); expected UTF-8 JSONL")
    return InputStream(path, raw, reader, compressed, size)
