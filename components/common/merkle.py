"""BLAKE3 Merkle trees over fixed-size chunks (the bao idea): any chunk of any file can
be checked against one root, and a stream is hashed as it is written, with no second read.

Domain separation: a leaf is H(0x00 || chunk), an inner node H(0x01 || left || right),
a file entry H(0x02 || size || path || file_root) and a tree root
H(0x03 || count || entries sorted by path). The tree shape is RFC 6962's (the left
subtree holds the largest power of two strictly below n leaves), so proofs are short and
an appended chunk never changes earlier subtrees.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import BinaryIO, Iterable, Sequence

from blake3 import blake3

DEFAULT_CHUNK_SIZE = 1 << 20
_LEAF, _NODE, _FILE, _ROOT = b"\x00", b"\x01", b"\x02", b"\x03"


def leaf_hash(chunk: bytes) -> bytes:
    return blake3(_LEAF + chunk).digest()


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
        return {"path": self.path, "size": self.size, "root": self.root.hex(),
                "leaves": [leaf.hex() for leaf in self.leaves]}

    @classmethod
    def from_json(cls, data: dict) -> "FileDigest":
        return cls(data["path"], int(data["size"]), bytes.fromhex(data["root"]),
                   [bytes.fromhex(h) for h in data["leaves"]])


class MerkleWriter:
    """Hashes bytes as they stream past (wrap a writer, or feed `update`).

    Only one chunk is buffered, so memory is bounded by the chunk size.
    """

    def __init__(self, chunk_size: int = DEFAULT_CHUNK_SIZE):
        self.chunk_size = chunk_size
        self.size = 0
        self.leaves: list[bytes] = []
        self._buf = bytearray()

    def update(self, data: bytes) -> None:
        self.size += len(data)
        self._buf += data
        while len(self._buf) >= self.chunk_size:
            self.leaves.append(leaf_hash(bytes(self._buf[: self.chunk_size])))
            del self._buf[: self.chunk_size]

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


def hash_file(file_path: str | os.PathLike, rel_path: str | None = None,
              chunk_size: int = DEFAULT_CHUNK_SIZE) -> FileDigest:
    with open(file_path, "rb") as stream:
        return hash_stream(stream, rel_path or os.path.basename(file_path), chunk_size)


def combine(files: Iterable[FileDigest]) -> bytes:
    """Root over several files: sorted by relative path, sizes and paths included."""
    entries = sorted(files, key=lambda f: f.path)
    acc = blake3(_ROOT + struct.pack("<Q", len(entries)))
    for entry in entries:
        acc.update(file_entry_hash(entry.path, entry.size, entry.root))
    return acc.digest()


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
        return {"format": self.FORMAT, "hash": "blake3", "chunk_size": self.chunk_size,
                "root": self.root.hex(),
                "files": [f.to_json() for f in sorted(self.files, key=lambda f: f.path)]}

    @classmethod
    def from_json(cls, data: dict) -> "Manifest":
        if data.get("format") != cls.FORMAT:
            raise ValueError(f"unknown manifest format {data.get('format')!r}")
        return cls(int(data["chunk_size"]), [FileDigest.from_json(f) for f in data["files"]])
