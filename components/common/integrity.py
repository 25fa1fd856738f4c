"""The one integrity module: how every sealed thing (a validated dataset, a model folder,
a Triton repository, a checkpoint) gets its Merkle root, and how it is verified, which
files are corrupted (and which byte ranges), missing, extra or resized, checked with
bounded memory in parallel. Stages and lineage call `seal` and `verify`.

Paths in a manifest can never escape its directory: absolute paths, `..`, backslashes
and symlinks are refused before anything is read.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from blake3 import blake3

from . import atomic, merkle
from .errors import InputError
from .signing import SIGNATURE_NAME

MANIFEST_NAME = "manifest.json"
# Files of a sealed folder its manifest does not cover: the manifest itself, and the
# model-signing signature written over the sealed folder (manifest included).
UNSEALED = (MANIFEST_NAME, SIGNATURE_NAME)
# Bytes per read when hashing a file back (verify; the checkpoint engine's durable save),
# rounded up to whole chunks: a block is hashed while it is still in the CPU's cache
# (4 MiB blocks cost a third more CPU); the kernel's readahead, not the block size,
# keeps the disk busy.
READ_BLOCK = 1 << 20
# Smallest piece of a file one verifier thread reads on its own, in chunks.
_MIN_PIECE_CHUNKS = 64
# Verifier threads, whatever the core count: each is a sequential stream the disk reads
# ahead for while it mostly waits (two streams on two cores left the disk a tenth short
# of a plain read, four match it), and four hash faster than one disk reads.
_THREADS = 4


class UnsafePath(ValueError):
    pass


def check_relpath(rel: str) -> str:
    """`rel` as a safe, normalized path inside a directory, or UnsafePath."""
    if not rel or "\\" in rel or "\x00" in rel or rel.startswith("/") or os.path.isabs(rel):
        raise UnsafePath(f"unsafe path {rel!r}: absolute or empty")
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise UnsafePath(f"unsafe path {rel!r}: '.', '..' or empty component")
    return rel


def list_files(root: str, exclude: tuple[str, ...] = UNSEALED) -> dict[str, int]:
    """Relative path -> size of every regular file under `root`; symlinks are refused."""
    out: dict[str, int] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in list(dirnames) + filenames:
            full = os.path.join(dirpath, name)
            info = os.lstat(full)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if stat.S_ISLNK(info.st_mode):
                raise UnsafePath(f"{rel}: symlinks are not allowed in a manifest directory")
            if stat.S_ISREG(info.st_mode) and rel not in exclude:
                out[rel] = info.st_size
    return dict(sorted(out.items()))


def hash_directory(
    root: str,
    chunk_size: int = merkle.DEFAULT_CHUNK_SIZE,
    exclude: tuple[str, ...] = UNSEALED,
    known: dict[str, merkle.FileDigest] | None = None,
) -> merkle.Manifest:
    """`known`: digests (same chunk size) of files whose bytes were just verified elsewhere,
    e.g. a verified folder copied in; those are not read again."""
    known = known or {}
    files = [
        known[rel]
        if rel in known and known[rel].size == size
        else merkle.hash_file(os.path.join(root, rel), rel, chunk_size)
        for rel, size in list_files(root, exclude).items()
    ]
    return merkle.Manifest(chunk_size, files)


@dataclass
class Problem:
    kind: str  # corrupted | missing | extra | size | unsafe_path | manifest
    path: str | None
    detail: str
    ranges: list[tuple[int, int]] = field(default_factory=list)  # bad byte ranges [start, end)


@dataclass
class VerifyReport:
    ok: bool
    root: str
    recomputed_root: str | None
    files_checked: int
    bytes_checked: int
    seconds: float
    problems: list[Problem]

    def to_json(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        if self.ok:
            return f"intact: {self.files_checked} files, {self.bytes_checked:,} bytes, root {self.root}"
        return f"NOT intact: {len(self.problems)} problem(s): " + "; ".join(
            f"{p.kind} {p.path or ''} {p.detail}".strip() for p in self.problems[:5]
        )


def _read_at(fd: int, buf: memoryview, offset: int) -> int:
    """Fill `buf` from `offset`; fewer bytes only at the end of the file."""
    got = 0
    while got < len(buf):
        n = os.preadv(fd, [buf[got:]], offset + got)
        if n == 0:
            break
        got += n
    return got


def _check_piece(path: str, chunk_size: int, first: int, leaves: list[bytes], present: int) -> list[int]:
    """Indexes of the bad chunks among [first, first + len(leaves)) of one file, read front
    to back in buffered reads of about `READ_BLOCK` and hashed as they arrive. Chunks
    past the end of a truncated file hash as empty and so fail."""
    per = max(1, READ_BLOCK // chunk_size)
    buf = memoryview(bytearray(per * chunk_size))
    end = min(present, (first + len(leaves)) * chunk_size)
    bad = []
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        for start in range(0, len(leaves), per):
            offset = (first + start) * chunk_size
            got = _read_at(fd, buf[: max(0, min(len(buf), end - offset))], offset)
            for j, expected in enumerate(leaves[start : start + per]):
                with buf[min(got, j * chunk_size) : min(got, (j + 1) * chunk_size)] as piece:
                    if merkle.leaf_hash(piece) != expected:
                        bad.append(first + start + j)
    finally:
        os.close(fd)
    return bad


def _check_files(
    root: str, chunk_size: int, targets: list[tuple[str, list[bytes], int]], threads: int
) -> dict[str, list[int]]:
    """Indexes of the bad chunks of each (path, leaves, present size) in `targets`.

    The files are cut into about one contiguous piece per thread (large files into
    several), and each thread reads its piece front to back and hashes each block while
    it is still in the CPU's cache: every piece is a sequential stream whose readahead
    keeps the disk busy, as a plain read does. (Page faults through mapped windows left
    the disk idle between windows on a cold cache; one reading thread handing blocks to
    hashing threads paid for the handoff and a copy that had left the cache.) Memory:
    one block per thread.
    """
    total = sum(len(leaves) for _, leaves, _ in targets)
    stripe = max(_MIN_PIECE_CHUNKS, -(-total // threads))
    pieces = [
        (rel, first, leaves[first : first + stripe], present)
        for rel, leaves, present in targets
        for first in range(0, len(leaves), stripe)
    ]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        results = list(pool.map(lambda p: (p[0], _check_piece(os.path.join(root, p[0]), chunk_size, *p[1:])), pieces))
    bad: dict[str, list[int]] = {rel: [] for rel, _, _ in targets}
    for rel, indexes in results:
        bad[rel].extend(indexes)
    return bad


def sha256_file(path: str) -> str:
    """Plain SHA-256 of one file, streamed: for digests others pin (a classifier
    checkpoint, a compiled pipeline spec), where a Merkle root is not what is asked."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def verify_sealed(folder: str, expected_root: str | None = None, what: str = "folder") -> str:
    """The root of a folder sealed with its own manifest, after every file is checked;
    InputError naming the folder and what is wrong otherwise."""
    path = os.path.join(folder, MANIFEST_NAME)
    if not os.path.isfile(path):
        raise InputError(f"{folder}: no {MANIFEST_NAME}; not a sealed {what}")
    manifest, stated = load_manifest(path)
    report = verify_directory(folder, manifest, stated_root=stated, expected_root=expected_root)
    if not report.ok:
        raise InputError(f"{folder}: {what} does not verify: {report.summary()}")
    return report.root


def load_manifest(path: str) -> tuple[merkle.Manifest, str]:
    """The manifest and the root it states (compared with its entries by the verifier)."""
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    return merkle.Manifest.from_json(data), str(data.get("root", ""))


def write_manifest(path: str, manifest: merkle.Manifest, extra: dict | None = None) -> str:
    """Write (fsynced) and return the root."""
    data = manifest.to_json()
    data.update(extra or {})
    atomic.write_json(path, data, indent=1, sort_keys=True)
    return data["root"]


def verify_directory(
    root: str,
    manifest: merkle.Manifest,
    stated_root: str | None = None,
    expected_root: str | None = None,
    only: list[str] | None = None,
    threads: int | None = None,
    exclude: tuple[str, ...] = UNSEALED,
    extras: bool | None = None,
) -> VerifyReport:
    """Check `root` against `manifest`, the manifest against the root it states, and that
    root against `expected_root` (pinned elsewhere: `latest`, artifact metadata, a chain).

    With `only`, just those files are read and each is proven against the root through
    its audit path; extra files are looked for only when `extras` says so (by default,
    when every file is read).
    """
    started = time.perf_counter()
    recomputed = manifest.root.hex()
    stated = stated_root or recomputed
    problems = _manifest_problems(manifest, stated, recomputed, expected_root)
    by_path = {}
    for f in manifest.files:
        try:
            by_path[check_relpath(f.path)] = f
        except UnsafePath as exc:
            problems.append(Problem("unsafe_path", f.path, str(exc)))
    for f in by_path.values():
        n_leaves = max(1, -(-f.size // manifest.chunk_size))
        if len(f.leaves) != n_leaves or merkle.tree_root(f.leaves) != f.root:
            problems.append(Problem("manifest", f.path, "file entry inconsistent (leaves do not give its root)"))
    try:
        present = list_files(root, exclude)
    except UnsafePath as exc:
        problems.append(Problem("unsafe_path", None, str(exc)))
        present = {}
    targets = list(by_path) if only is None else []
    for rel in only or []:
        if rel in by_path:
            targets.append(rel)
        else:
            problems.append(Problem("missing", rel, "not in the manifest"))
    if extras is None:
        extras = only is None
    if extras:
        for rel in present:
            if rel not in by_path and not any(rel == e for e in exclude):
                problems.append(Problem("extra", rel, f"{present[rel]:,} bytes not in the manifest"))
    work = _sized(targets, by_path, present, problems)
    checked_bytes = sum(min(present.get(r, 0), by_path[r].size) for r in targets if r in present)
    bad_by_file = _check_files(root, manifest.chunk_size, work, threads or _THREADS)
    for rel, bad in sorted(bad_by_file.items()):
        if bad:
            size = by_path[rel].size
            ranges = [(i * manifest.chunk_size, min(size, (i + 1) * manifest.chunk_size)) for i in sorted(bad)]
            problems.append(Problem("corrupted", rel, f"{len(bad)} bad chunk(s)", ranges))
    if only is not None:
        count = len(manifest.files)
        for rel in targets:
            if rel in present and not bad_by_file.get(rel) and present[rel] == by_path[rel].size:
                proof = merkle.file_proof(manifest.files, rel)
                if not merkle.verify_file_proof(by_path[rel], proof, count, bytes.fromhex(expected_root or stated)):
                    problems.append(Problem("manifest", rel, "audit path does not lead to the root"))
    return VerifyReport(
        not problems, stated, recomputed, len(targets), checked_bytes, time.perf_counter() - started, problems
    )


def _manifest_problems(manifest, stated: str, recomputed: str, expected_root: str | None) -> list[Problem]:
    """The manifest's own root against the root it states, and that against the pin."""
    problems = []
    if stated != recomputed:
        problems.append(Problem("manifest", None, f"stated root {stated} does not match its entries ({recomputed})"))
    if expected_root and expected_root != stated:
        problems.append(Problem("manifest", None, f"root {stated} is not the expected {expected_root}"))
    return problems


def _sized(targets: list[str], by_path: dict, present: dict, problems: list[Problem]) -> list[tuple]:
    """The files to read (path, leaves, size on disk); a missing file or one of another
    size is a problem (the latter is still read, to name its bad chunks)."""
    work = []
    for rel in targets:
        f = by_path[rel]
        if rel not in present:
            problems.append(Problem("missing", rel, f"expected {f.size:,} bytes"))
            continue
        if present[rel] != f.size:
            problems.append(
                Problem(
                    "size",
                    rel,
                    f"{present[rel]:,} bytes, expected {f.size:,}",
                    [(min(present[rel], f.size), max(present[rel], f.size))],
                )
            )
        work.append((rel, f.leaves, present[rel]))
    return work


# --- Checkpoints: a tag folder whose manifest also commits to the run's metadata ------
CHECKPOINT_FORMAT = "kfp-llmops-checkpoint/1"
TAG_RE = re.compile(r"^step-(\d{8})$")
_META_DOMAIN = b"\x04"


def checkpoint_root(files_root: str, meta: dict) -> str:
    """The root commits to the files and the metadata, the previous root included."""
    canonical = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()
    return blake3(_META_DOMAIN + bytes.fromhex(files_root) + canonical).hexdigest()


def list_tags(ckpt_root: str) -> list[tuple[int, str]]:
    """Committed tags, newest first (staging folders are not tags)."""
    if not os.path.isdir(ckpt_root):
        return []
    tags = [
        (int(m.group(1)), name)
        for name in os.listdir(ckpt_root)
        if (m := TAG_RE.match(name)) and os.path.isdir(os.path.join(ckpt_root, name))
    ]
    return sorted(tags, reverse=True)


def load_checkpoint(tag_dir: str) -> tuple[merkle.Manifest, dict]:
    """The files manifest and the stated fields (root, files_root, meta)."""
    path = os.path.join(tag_dir, MANIFEST_NAME)
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    if data.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: not a kfp-llmops checkpoint manifest")
    files = dict(data, format=merkle.Manifest.FORMAT)
    return merkle.Manifest.from_json(files), {k: data.get(k) for k in ("root", "files_root", "meta")}


def verify_checkpoint(
    tag_dir: str,
    expected_root: str | None = None,
    only: list[str] | None = None,
    threads: int | None = None,
    extras: bool | None = None,
) -> VerifyReport:
    """Files against the manifest, the manifest against its root, and the root against
    `expected_root` when one is pinned."""
    started = time.perf_counter()
    try:
        manifest, stated = load_checkpoint(tag_dir)
    except FileNotFoundError:
        return _failed("missing", "manifest.json is missing", started)
    except (ValueError, KeyError, TypeError) as exc:
        return _failed("manifest", f"unreadable manifest: {exc}", started)
    report = verify_directory(
        tag_dir, manifest, stated_root=stated["files_root"], only=only, threads=threads, extras=extras
    )
    root = checkpoint_root(stated["files_root"] or "", stated["meta"] or {}) if stated["files_root"] else ""
    if root != stated["root"]:
        report.problems.append(Problem("manifest", None, "root does not match files root + metadata"))
    if expected_root and stated["root"] != expected_root:
        report.problems.append(Problem("manifest", None, f"root {stated['root']} is not the expected {expected_root}"))
    report.root = stated["root"] or ""
    report.ok = not report.problems
    return report


def _failed(kind: str, detail: str, started: float) -> VerifyReport:
    return VerifyReport(False, "", None, 0, 0, time.perf_counter() - started, [Problem(kind, MANIFEST_NAME, detail)])


# --- One entry point per kind ----------------------------------------------------------
# A dataset is one file (validate_dataset's clean output) hashed under this name; its root
# travels in artifact metadata with the chunk size it was hashed at, never a default.
DATASET_FILE = "clean.jsonl"
KINDS = ("dataset", "model", "repository", "checkpoint")


def chunk_size_of(metadata: dict | None) -> int:
    """The chunk size an artifact was sealed at (recorded beside its root), else the default."""
    value = (metadata or {}).get("chunk_size")
    return int(value) if value else merkle.DEFAULT_CHUNK_SIZE


def dataset_root(digest: merkle.FileDigest, chunk_size: int) -> str:
    """The root of a dataset file from its digest (hashed while written or read back)."""
    return merkle.Manifest(chunk_size, [digest]).root.hex()


def seal(
    kind: str, path: str, chunk_size: int = merkle.DEFAULT_CHUNK_SIZE, known: dict[str, merkle.FileDigest] | None = None
) -> str:
    """The root of `path`. Folders (model, repository) get their manifest written; a
    dataset's root is returned only (it travels in metadata); a dataset folder (part
    files) is every file's bytes under its name. Checkpoints are sealed as they are
    written (`training.checkpoints.commit`)."""
    if kind == "dataset" and os.path.isdir(path):
        return hash_directory(path, chunk_size).root.hex()
    if kind == "dataset":
        return dataset_root(merkle.hash_file(path, DATASET_FILE, chunk_size), chunk_size)
    if kind in ("model", "repository"):
        return write_manifest(os.path.join(path, MANIFEST_NAME), hash_directory(path, chunk_size, known=known))
    raise ValueError(f"cannot seal a {kind!r} here; kinds: {', '.join(KINDS[:3])}")


def verify(kind: str, path: str, root: str | None = None, chunk_size: int | None = None) -> str:
    """The root of `path` after every byte is checked against its manifest (folders) or
    re-hashed at `chunk_size` (datasets), and against `root` when one is pinned;
    InputError naming the path and what is wrong otherwise."""
    if kind == "dataset":
        if not os.path.exists(path):
            raise InputError(f"{path}: dataset not found")
        found = seal("dataset", path, chunk_size or merkle.DEFAULT_CHUNK_SIZE)
        if root and found != root:
            raise InputError(
                f"{path}: Merkle root {found} (chunk size {chunk_size or merkle.DEFAULT_CHUNK_SIZE:,}) "
                f"does not match the pinned root {root}"
            )
        return found
    if kind in ("model", "repository"):
        return verify_sealed(path, root, "model repository" if kind == "repository" else "model")
    if kind == "checkpoint":
        report = verify_checkpoint(path, root)
        if not report.ok:
            raise InputError(f"{path}: checkpoint does not verify: {report.summary()}")
        return report.root
    raise ValueError(f"unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
