"""Checkpoint commit and selection.

Commit: every rank hashes what it writes into a staging directory; rank 0 gathers the
digests, writes the manifest (files root plus metadata: step, config hash, dataset and
base-model roots, environment, previous root), fsyncs, renames the tag into place and
only then replaces `latest` (temp file + rename). A crash at any point leaves either the
previous state or the new complete one.

Selection: the newest tag that verifies wins; damaged ones are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass

from kfp_llmops.components.common import atomic, integrity, merkle


def tag_for(step: int) -> str:
    return f"step-{step:08d}"


def read_latest(ckpt_root: str) -> str | None:
    try:
        with open(os.path.join(ckpt_root, "latest"), encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def resolve_tag(ckpt_dir: str, tag: str | None = None) -> str:
    """The folder of checkpoint `tag` in `ckpt_dir`; without a tag, the one `latest`
    names, else the newest; `ckpt_dir` itself when it is one checkpoint's folder."""
    from kfp_llmops.components.common.errors import LlmopsError

    if not os.path.isdir(ckpt_dir):
        raise LlmopsError(f"{ckpt_dir}: no such checkpoint directory")
    if tag is None and os.path.isfile(os.path.join(ckpt_dir, integrity.MANIFEST_NAME)):
        return ckpt_dir
    tags = [t for _, t in integrity.list_tags(ckpt_dir)]
    tag = tag or read_latest(ckpt_dir) or (tags[0] if tags else None)
    if tag is None:
        raise LlmopsError(f"{ckpt_dir}: no checkpoint tags")
    tag_dir = os.path.join(ckpt_dir, tag)
    if not os.path.isdir(tag_dir):
        raise LlmopsError(f"{tag_dir}: no such checkpoint tag")
    return tag_dir


def write_latest(ckpt_root: str, tag: str, durable: bool) -> None:
    atomic.write_text(os.path.join(ckpt_root, "latest"), tag, durable)


@dataclass
class CommitResult:
    tag: str
    root: str
    files: int
    bytes: int
    commit_seconds: float


def commit(
    ckpt_root: str,
    staging: str,
    tag: str,
    digests: list[merkle.FileDigest],
    chunk_size: int,
    meta: dict,
    durable: bool = True,
    keep_last: int | None = None,
) -> CommitResult:
    """Rank 0's half of a save: manifest, rename into place, `latest`, retention."""
    started = time.perf_counter()
    tag_dir = os.path.join(staging, tag)
    present = integrity.list_files(tag_dir)
    by_path = {d.path: d for d in digests}
    for rel in present:  # files DeepSpeed wrote outside the engine
        if rel not in by_path:
            by_path[rel] = merkle.hash_file(os.path.join(tag_dir, rel), rel, chunk_size)
    missing = [p for p in by_path if p not in present]
    wrong = [p for p, d in by_path.items() if p in present and present[p] != d.size]
    if missing or wrong:
        raise RuntimeError(f"checkpoint {tag}: hashed files missing {missing} or resized {wrong}")
    manifest = merkle.Manifest(chunk_size, list(by_path.values()))
    files_root = manifest.root.hex()
    root = integrity.checkpoint_root(files_root, meta)
    integrity.write_manifest(
        os.path.join(tag_dir, integrity.MANIFEST_NAME),
        manifest,
        {"format": integrity.CHECKPOINT_FORMAT, "files_root": files_root, "root": root, "meta": meta},
    )
    # The manifest must verify (entries consistent, file set and sizes exact) before the
    # tag becomes visible; content was hashed as it was written, so nothing is re-read.
    loaded, stated = integrity.load_checkpoint(tag_dir)
    if stated["root"] != root or integrity.list_files(tag_dir) != {f.path: f.size for f in loaded.files}:
        raise RuntimeError(f"checkpoint {tag}: manifest does not verify after writing")
    if durable:
        atomic.fsync_dir(tag_dir)
    final = os.path.join(ckpt_root, tag)
    if os.path.exists(final):  # a damaged tag from an earlier crash
        shutil.rmtree(final)
    os.replace(tag_dir, final)
    if durable:
        atomic.fsync_dir(ckpt_root)
    write_latest(ckpt_root, tag, durable)
    shutil.rmtree(staging, ignore_errors=True)
    if keep_last:
        for _, old in integrity.list_tags(ckpt_root)[keep_last:]:
            shutil.rmtree(os.path.join(ckpt_root, old), ignore_errors=True)
    size = sum(f.size for f in manifest.files)
    return CommitResult(tag, root, len(manifest.files), size, time.perf_counter() - started)


def newest_intact(ckpt_root: str) -> tuple[str | None, dict | None, list[str]]:
    """(tag, stated fields, reasons for every newer tag that was skipped)."""
    skipped = []
    for _, tag in integrity.list_tags(ckpt_root):
        report = integrity.verify_checkpoint(os.path.join(ckpt_root, tag))
        if report.ok:
            return tag, integrity.load_checkpoint(os.path.join(ckpt_root, tag))[1], skipped
        skipped.append(f"{tag}: {report.summary()}")
    return None, None, skipped
