"""Inputs named by URI: a path on a mounted volume as it is; http(s) and fsspec URIs
(s3://, gs://, ...) copied once into a work folder. Whoever fetches verifies what it got
by its Merkle root; nothing here trusts the transport."""

from __future__ import annotations

import os

from . import atomic
from .errors import InputError


def fetch(uri: str, work: str, name: str) -> str:
    """A local path (a mounted PVC) as it is; http(s) and fsspec URIs (s3://, gs://, ...)
    copied once into `<work>/inputs/<name>`. The stages verify what they get by its root."""
    if "://" not in uri:
        if not os.path.exists(uri):
            raise InputError(f"{uri}: no such file or folder (give a path on a mounted volume or a URI)")
        return uri
    dest = os.path.join(work, "inputs", name)
    if os.path.exists(dest):
        return dest
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    partial = dest + ".partial"
    try:
        if uri.startswith(("http://", "https://")):
            import shutil
            import urllib.request

            with urllib.request.urlopen(uri, timeout=60) as resp, atomic.AtomicFile(dest) as out:
                shutil.copyfileobj(resp, out.handle)
            return dest
        try:
            import fsspec
        except ImportError:
            raise InputError(f"{uri}: reading this URI needs fsspec and its backend (e.g. s3fs)") from None
        fs, path = fsspec.core.url_to_fs(uri)
        fs.get(path, partial, recursive=fs.isdir(path))
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any transport error becomes one line naming the URI
        raise InputError(f"{uri}: cannot fetch: {exc}") from None
    os.replace(partial, dest)
    return dest
