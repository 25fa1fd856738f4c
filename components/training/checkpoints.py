"""Checkpoint commit and selection.

Commit: every rank hashes what it writes into a staging directory; rank 0 gathers the
digests, writes the manifest (files root plus metadata: step, config hash, dataset and
base-model roots, environment, previous root), fsyncs, renames the tag into place and
only then replaces `latest` (temp file + rename). A crash at any point leaves either the
previous state or the new complete one.

Selection: the newest tag that verifies wins; damaged ones are skipped with the reason.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass

from blake3 import blake3

from kfp_llmops.components.common import integrity, merkle

FORMAT = "kfp-llmops-checkpoint/1"
TAG_RE = re.compile(r"^step-(\d{8})$")
_META_DOMAIN = b"\x04"


def tag_for(step: int) -> str:
    return f"step-{step:08d}"


def checkpoint_root(files_root: str, meta: dict) -> str:
    """The root commits to the files and the metadata, the previous root included."""
    canonical = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()
    return blake3(_META_DOMAIN + bytes.fromhex(files_root) + canonical).hexdigest()


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def list_tags(ckpt_root: str) -> list[tuple[int, str]]:
    """Committed tags, newest first (staging folders are not tags)."""
    if not os.path.isdir(ckpt_root):
        return []
    tags = [(int(m.group(1)), name) for name in os.listdir(ckpt_root)
            if (m := TAG_RE.match(name)) and os.path.isdir(os.path.join(ckpt_root, name))]
    return sorted(tags, reverse=True)


def read_latest(ckpt_root: str) -> str | None:
    try:
        with open(os.path.join(ckpt_root, "latest"), encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def write_latest(ckpt_root: str, tag: str, durable: bool) -> None:
    tmp = os.path.join(ckpt_root, "latest.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(tag)
        handle.flush()
        if durable:
            os.fsync(handle.fileno())
    os.replace(tmp, os.path.join(ckpt_root, "latest"))
    if durable:
        fsync_dir(ckpt_root)


@dataclass
class CommitResult:
    tag: str
    root: str
    files: int
    bytes: int
    commit_seconds: float


def commit(ckpt_root: str, staging: str, tag: str, digests: list[merkle.FileDigest], chunk_size: int,
           meta: dict, durable: bool = True, keep_last: int | None = None) -> CommitResult:
    """Rank 0's half of a save: manifest, rename into place, `latest`, retention."""
    started = time.perf_counter()
    tag_dir = os.path.join(staging, tag)
    present = integrity.list_files(tag_dir)
    by_path = {d.path: d for d in digests}
    for rel, size in present.items():             # files DeepSpeed wrote outside the engine
        if rel not in by_path:
            by_path[rel] = merkle.hash_file(os.path.join(tag_dir, rel), rel, chunk_size)
    missing = [p for p in by_path if p not in present]
    wrong = [p for p, d in by_path.items() if p in present and present[p] != d.size]
    if missing or wrong:
        raise RuntimeError(f"checkpoint {tag}: hashed files missing {missing} or resized {wrong}")
    manifest = merkle.Manifest(chunk_size, list(by_path.values()))
    files_root = manifest.root.hex()
    root = checkpoint_root(files_root, meta)
    integrity.write_manifest(os.path.join(tag_dir, integrity.MANIFEST_NAME), manifest,
                             {"format": FORMAT, "files_root": files_root, "root": root, "meta": meta})
    # The manifest must verify (entries consistent, file set and sizes exact) before the
    # tag becomes visible; content was hashed while written, so nothing is re-read.
    loaded, stated = load(tag_dir)
    if stated["root"] != root or integrity.list_files(tag_dir) != {f.path: f.size for f in loaded.files}:
        raise RuntimeError(f"checkpoint {tag}: manifest does not verify after writing")
    if durable:
        fsync_dir(tag_dir)
    final = os.path.join(ckpt_root, tag)
    if os.path.exists(final):                      # a damaged tag from an earlier crash
        shutil.rmtree(final)
    os.replace(tag_dir, final)
    if durable:
        fsync_dir(ckpt_root)
    write_latest(ckpt_root, tag, durable)
    shutil.rmtree(staging, ignore_errors=True)
    if keep_last:
        for _, old in list_tags(ckpt_root)[keep_last:]:
            shutil.rmtree(os.path.join(ckpt_root, old), ignore_errors=True)
    size = sum(f.size for f in manifest.files)
    return CommitResult(tag, root, len(manifest.files), size, time.perf_counter() - started)


def load(tag_dir: str) -> tuple[merkle.Manifest, dict]:
    """The files manifest and the stated fields (root, files_root, meta)."""
    path = os.path.join(tag_dir, integrity.MANIFEST_NAME)
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a kfp-llmops checkpoint manifest")
    files = dict(data, format=merkle.Manifest.FORMAT)
    return merkle.Manifest.from_json(files), {k: data.get(k) for k in ("root", "files_root", "meta")}


def verify(tag_dir: str, expected_root: str | None = None, only: list[str] | None = None,
           threads: int | None = None, extras: bool | None = None) -> integrity.VerifyReport:
    """Files against the manifest, the manifest against its root, and the root against
    `expected_root` when one is pinned."""
    started = time.perf_counter()
    try:
        manifest, stated = load(tag_dir)
    except FileNotFoundError:
        return _failed(tag_dir, "missing", "manifest.json is missing", started)
    except (ValueError, KeyError, TypeError) as exc:
        return _failed(tag_dir, "manifest", f"unreadable manifest: {exc}", started)
    report = integrity.verify_directory(tag_dir, manifest, stated_root=stated["files_root"], only=only,
                                        threads=threads, extras=extras)
    root = checkpoint_root(stated["files_root"] or "", stated["meta"] or {}) if stated["files_root"] else ""
    if root != stated["root"]:
        report.problems.append(integrity.Problem("manifest", None, "root does not match files root + metadata"))
    if expected_root and stated["root"] != expected_root:
        report.problems.append(integrity.Problem("manifest", None,
                                                 f"root {stated['root']} is not the expected {expected_root}"))
    report.root = stated["root"] or ""
    report.ok = not report.problems
    return report


def _failed(tag_dir: str, kind: str, detail: str, started: float) -> integrity.VerifyReport:
    return integrity.VerifyReport(False, "", None, 0, 0, time.perf_counter() - started,
                                  [integrity.Problem(kind, integrity.MANIFEST_NAME, detail)])


def newest_intact(ckpt_root: str, verify_fn=verify) -> tuple[str | None, dict | None, list[str]]:
    """(tag, stated fields, reasons for every newer tag that was skipped)."""
    skipped = []
    for _, tag in list_tags(ckpt_root):
        report = verify_fn(os.path.join(ckpt_root, tag))
        if report.ok:
            return tag, load(os.path.join(ckpt_root, tag))[1], skipped
        skipped.append(f"{tag}: {report.summary()}")
    return None, None, skipped
