"""The watermark key: from a file (a mounted Kubernetes Secret is a file), or an
environment variable. Never from config or compiled pipeline YAML."""

from __future__ import annotations

import os

from ..errors import InputError

ENV_VAR = "LLMOPS_WATERMARK_KEY"
DEFAULT_SECRET_PATH = "/var/run/secrets/kfp-llmops/watermark/key"


def parse_key(text: str, origin: str) -> int:
    value = text.strip()
    try:
        key = int(value, 16) if value.lower().startswith("0x") else int(value)
    except ValueError:
        raise InputError(f"{origin}: watermark key must be a decimal or 0x-hex integer") from None
    if not 0 < key < 2**63:
        raise InputError(f"{origin}: watermark key must be in 1 .. 2^63-1")
    return key


def load_key(key_file: str | None = None) -> int:
    """`key_file`, else $LLMOPS_WATERMARK_KEY, else the mounted Secret's file."""
    if key_file:
        try:
            with open(key_file, encoding="utf-8") as handle:
                return parse_key(handle.read(), key_file)
        except OSError as exc:
            raise InputError(f"{key_file}: cannot read watermark key: {exc.strerror}") from None
    if os.environ.get(ENV_VAR):
        return parse_key(os.environ[ENV_VAR], f"${ENV_VAR}")
    if os.path.isfile(DEFAULT_SECRET_PATH):
        return load_key(DEFAULT_SECRET_PATH)
    raise InputError(f"no watermark key: pass --key-file, set ${ENV_VAR}, or mount the Secret at {DEFAULT_SECRET_PATH}")
