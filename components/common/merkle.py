"""BLAKE3 Merkle trees over fixed-size chunks (the bao idea): any chunk of any file can
be checked against one root, and a stream is hashed as it is written, with no second read.

Domain separation: a leaf is H(0x00 || chunk), an inner node H(0x01 || left || right),
a file entry H(0x02 || size || path || file_root), and the root of several files
H(0x03 || count || tree over the file entries sorted by path). Both trees have RFC
6962's shape (the left subtree holds the largest power of two strictly below n leaves),
so a chunk proves itself against its file root, and a file against the root, with
log-size paths.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from blake3 import blake3

DEFAULT_CHUNK_SIZE = 1 << 20
_LEAF, _NODE, _FILE, _ROOT = b"\x00", b"\x01", b"\x02", b"\x03"


def leaf_hash(chunk) -> bytes:
    """Accepts any buffer (bytes, memoryview) without copying it."""
    hasher = blake3(_LEAF)
    hasher.update(chunk)
    return hasher.digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return blake3(_NODE + left + right).digest()


def tree_root(leaves: Sequence[bytes]) -> bytes:
    """Root of the RFC 6962-shaped tree over `leaves` (an empty file has one empty leaf)."""
    if not leaves:
        return leaf_hash(b"")
    level = list(leaves)
    # Bottom-up pairing gives the RFC 6962 shape: an odd node is carried up unchanged.
    while len(level) > 1:
        nxt = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def proof(leaves: Sequence[bytes], index: int) -> list[tuple[str, bytes]]:
    """Audit path for leaf `index`: the sibling hashes, bottom-up, with their side."""
    path: list[tuple[str, bytes]] = []
    level = list(leaves)
    while len(level) > 1:
        sibling = index ^ 1
        if sibling < len(level):
            path.append(("L" if sibling < index else "R", level[sibling]))
        nxt = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level, index = nxt, index // 2
    return path


def verify_proof(leaf: bytes, path: Iterable[tuple[str, bytes]], root: bytes) -> bool:
    acc = leaf
    for side, sibling in path:
        acc = node_hash(sibling, acc) if side == "L" else node_hash(acc, sibling)
    return acc == root


def file_entry_hash(path: str, size: int, root: bytes) -> bytes:
    encoded = path.encode("utf-8")
    return blake3(_FILE + struct.pack("<QQ", size, len(encoded)) + encoded + root).digest()


@dataclass
class FileDigest:
    path: str
    size: int
    root: bytes
    leaves: list[bytes] = field(repr=False)

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "size": self.size,
            "root": self.root.hex(),
            "leaves": [leaf.hex() for leaf in self.leaves],
        }

    @classmethod
    def from_json(cls, data: dict) -> FileDigest:
        return cls(
            data["path"], int(data["size"]), bytes.fromhex(data["root"]), [bytes.fromhex(h) for h in data["leaves"]]
        )


class MerkleWriter:
    """Hashes bytes as they stream past (wrap a writer, or feed `update`).

    Only one chunk is buffered, so memory is bounded by the chunk size.
    """

    def __init__(self, chunk_size: int = DEFAULT_CHUNK_SIZE):
        self.chunk_size = chunk_size
        self.size = 0
        self.leaves: list[bytes] = []
        self._buf = bytearray()

    def update(self, data) -> None:
        view = memoryview(data).cast("B")
        self.size += len(view)
        size = self.chunk_size
        if self._buf:  # top up a partial chunk first
            take = min(size - len(self._buf), len(view))
            self._buf += view[:take]
            view = view[take:]
            if len(self._buf) < size:
                return
            self.leaves.append(leaf_hash(self._buf))
            self._buf = bytearray()
        whole = len(view) - len(view) % size  # full chunks straight from the caller's buffer
        for start in range(0, whole, size):
            self.leaves.append(leaf_hash(view[start : start + size]))
        if whole < len(view):
            self._buf += view[whole:]

    def finish(self, path: str) -> FileDigest:
        leaves = list(self.leaves)
        if self._buf or not leaves:
            leaves.append(leaf_hash(bytes(self._buf)))
        return FileDigest(path, self.size, tree_root(leaves), leaves)


def hash_stream(stream: BinaryIO, path: str, chunk_size: int = DEFAULT_CHUNK_SIZE) -> FileDigest:
    writer = MerkleWriter(chunk_size)
    while True:
        chunk = stream.read(chunk_size)
        if not chunk:
            break
        writer.update(chunk)
    return writer.finish(path)


def hash_file(
    file_path: str | os.PathLike, rel_path: str | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> FileDigest:
    with open(file_path, "rb") as stream:
        return hash_stream(stream, rel_path or os.path.basename(file_path), chunk_size)


def _entries(files: Iterable[FileDigest]) -> list[bytes]:
    return [file_entry_hash(f.path, f.size, f.root) for f in sorted(files, key=lambda f: f.path)]


def _seal(count: int, tree: bytes) -> bytes:
    return blake3(_ROOT + struct.pack("<Q", count) + tree).digest()


def combine(files: Iterable[FileDigest]) -> bytes:
    """Root over several files: sorted by relative path, sizes and paths included."""
    entries = _entries(files)
    return _seal(len(entries), tree_root(entries))


def file_proof(files: Sequence[FileDigest], path: str) -> list[tuple[str, bytes]]:
    """Audit path proving one file's entry against `combine(files)`."""
    ordered = sorted(files, key=lambda f: f.path)
    index = next(i for i, f in enumerate(ordered) if f.path == path)
    return proof(_entries(ordered), index)


def verify_file_proof(digest: FileDigest, path: Iterable[tuple[str, bytes]], count: int, root: bytes) -> bool:
    """Does a file (its recomputed size and root) belong to the tree with this root?"""
    entry = file_entry_hash(digest.path, digest.size, digest.root)
    acc = entry
    for side, sibling in path:
        acc = node_hash(sibling, acc) if side == "L" else node_hash(acc, sibling)
    return _seal(count, acc) == root


@dataclass
class Manifest:
    """The files of one artifact, each with its chunk leaves, and their combined root."""

    chunk_size: int
    files: list[FileDigest]

    FORMAT = "kfp-llmops-merkle/1"

    @property
    def root(self) -> bytes:
        return combine(self.files)

    def to_json(self) -> dict:
        return {
            "format": self.FORMAT,
            "hash": "blake3",
            "chunk_size": self.chunk_size,
            "root": self.root.hex(),
            "files": [f.to_json() for f in sorted(self.files, key=lambda f: f.path)],
        }

    @classmethod
    def from_json(cls, data: dict) -> Manifest:
        if data.get("format") != cls.FORMAT:
            raise ValueError(f"unknown manifest format {data.get('format')!r}")
        return cls(int(data["chunk_size"]), [FileDigest.from_json(f) for f in data["files"]])
