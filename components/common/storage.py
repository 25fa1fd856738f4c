"""The sealed Triton repository in the storage KServe reads, under its own Merkle root,
and proof that what landed there is what was sealed: checked by the deploy stage after
upload, and by `llmops lineage verify` later (the bytes a cluster serves).

URIs are fsspec's (s3:// with s3fs, gs:// with gcsfs, file://, ...) plus KServe's
`pvc://<claim>/<path>`, which the deploy pod reaches where that claim is mounted
(`cluster.pvc_mounts`). Files go first (the model-signing signature with them, stored next
to the model as registries keep it) and the manifest last, so a manifest in storage
means a complete upload; the copy is then read back through the same filesystem and
re-hashed chunk by chunk against the manifest. An existing copy under the same root is
verified and kept (uploads are idempotent and retries are cheap).
"""

from __future__ import annotations

import json
import os

from . import integrity, merkle
from .errors import InputError
from .signing import SIGNATURE_NAME


def destination(storage_uri: str, repository_root: str) -> str:
    return storage_uri.rstrip("/") + f"/{repository_root}"


def _filesystem(uri: str, pvc_mounts: dict[str, str]):
    """(fsspec filesystem, path) for `uri`; pvc:// through the claim's mount."""
    try:
        import fsspec
    except ImportError:
        raise InputError(f"{uri}: uploading the model repository needs fsspec") from None
    if uri.startswith("pvc://"):
        claim, _, rest = uri.removeprefix("pvc://").partition("/")
        if claim not in pvc_mounts:
            raise InputError(
                f"{uri}: claim {claim!r} is not mounted in this pod (cluster.pvc_mounts: "
                f"{', '.join(pvc_mounts) or 'none'})"
            )
        uri = os.path.join(pvc_mounts[claim], rest)
    try:
        return fsspec.core.url_to_fs(uri)
    except (ImportError, ValueError) as exc:
        raise InputError(f"{uri}: no filesystem for this URI ({exc}); install its fsspec backend, e.g. s3fs") from None


def verify_remote(fs, base: str, manifest: merkle.Manifest, root: str, uri: str, signed: bool = False) -> None:
    """Re-hash every file as stored; the first difference is a one-line error."""
    listed = {os.path.relpath(p, base).replace(os.sep, "/") for p in fs.find(base)}
    expected = {f.path for f in manifest.files} | {integrity.MANIFEST_NAME} | ({SIGNATURE_NAME} if signed else set())
    if listed != expected:
        extra, missing = sorted(listed - expected), sorted(expected - listed)
        raise InputError(
            f"{uri}: stored copy differs: "
            + "; ".join(
                ([f"unexpected {', '.join(extra[:3])}"] if extra else [])
                + ([f"missing {', '.join(missing[:3])}"] if missing else [])
            )
        )
    for want in manifest.files:
        with fs.open(f"{base}/{want.path}", "rb") as stream:
            got = merkle.hash_stream(stream, want.path, manifest.chunk_size)
        if got.size != want.size or got.root != want.root:
            bad = next((i for i, (a, b) in enumerate(zip(got.leaves, want.leaves, strict=False)) if a != b), None)
            where = f"chunk {bad}" if bad is not None else f"size {got.size} != {want.size}"
            raise InputError(f"{uri}/{want.path}: stored bytes differ from the sealed repository ({where})")
    with fs.open(f"{base}/{integrity.MANIFEST_NAME}", "rb") as stream:
        stated = merkle.Manifest.from_json(json.load(stream))
    if stated.root.hex() != root:
        raise InputError(f"{uri}/{integrity.MANIFEST_NAME}: stored manifest has root {stated.root.hex()}, not {root}")


def upload(repo_dir: str, storage_uri: str, pvc_mounts: dict[str, str] | None = None, log=print) -> str:
    """Upload (or find) the repository under `<storage_uri>/<root>`, verified; returns that URI."""
    manifest, root = integrity.load_manifest(os.path.join(repo_dir, integrity.MANIFEST_NAME))
    uri = destination(storage_uri, root)
    fs, base = _filesystem(uri, pvc_mounts or {})
    base = base.rstrip("/")
    signed = os.path.isfile(os.path.join(repo_dir, SIGNATURE_NAME))
    if fs.exists(f"{base}/{integrity.MANIFEST_NAME}"):
        verify_remote(fs, base, manifest, root, uri, signed)
        log(f"[deploy] {uri}: already stored and verified")
        return uri
    try:
        for rel in sorted(f.path for f in manifest.files) + ([SIGNATURE_NAME] if signed else []):
            fs.makedirs(os.path.dirname(f"{base}/{rel}"), exist_ok=True)
            fs.put_file(os.path.join(repo_dir, rel), f"{base}/{rel}")
        fs.put_file(os.path.join(repo_dir, integrity.MANIFEST_NAME), f"{base}/{integrity.MANIFEST_NAME}")
    except OSError as exc:
        raise InputError(f"{uri}: upload failed: {exc}") from None
    verify_remote(fs, base, manifest, root, uri, signed)
    log(f"[deploy] {uri}: uploaded {len(manifest.files)} files, verified")
    return uri


class Unreachable(InputError):
    """The storage cannot be reached from here (no backend, no credentials, no network)."""


def verify_stored(uri: str, root: str, pvc_mounts: dict[str, str] | None = None) -> str:
    """The stored copy at `uri` re-hashed against its own manifest, whose root must be
    `root`: what a cluster serves, checked from wherever the storage is reachable."""
    try:
        fs, base = _filesystem(uri, pvc_mounts or {})
    except InputError as exc:
        raise Unreachable(str(exc)) from None
    base = base.rstrip("/")
    try:
        with fs.open(f"{base}/{integrity.MANIFEST_NAME}", "rb") as stream:
            manifest = merkle.Manifest.from_json(json.load(stream))
    except FileNotFoundError:
        raise InputError(f"{uri}: no stored manifest: the served copy is gone or incomplete") from None
    except OSError as exc:
        raise Unreachable(f"{uri}: {type(exc).__name__}: {exc}") from None
    except ValueError as exc:
        raise InputError(f"{uri}/{integrity.MANIFEST_NAME}: unreadable stored manifest: {exc}") from None
    verify_remote(fs, base, manifest, root, uri, fs.exists(f"{base}/{SIGNATURE_NAME}"))
    return root
