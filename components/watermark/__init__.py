"""Stage 4, verify_watermark (in progress): the KGW text watermark (`kgw.py`) and its
key handling (`keys.py`). The weight watermark and the verification component come next.
"""
from __future__ import annotations

import json

from kfp_llmops.components.common.errors import InputError


def read_texts(path: str) -> list[tuple[str, str]]:
    """(id, text) from JSONL rows with `response` or `text` (responses.jsonl works as is)."""
    out = []
    try:
        handle = open(path, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    with handle:
        for n, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise InputError(f"{path}:{n}: not valid JSON") from None
            text = row.get("response", row.get("text")) if isinstance(row, dict) else None
            if not isinstance(text, str):
                raise InputError(f"{path}:{n}: no 'response' or 'text' string field")
            out.append((str(row.get("id", n)), text))
    return out


def detect_file(path: str, tokenizer_dir: str, key: int, scheme: str = "lefthash", gamma: float = 0.25,
                z_threshold: float = 4.0, min_tokens: int = 16) -> list[dict]:
    from transformers import AutoTokenizer

    from .kgw import Watermark

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    wm = Watermark(key, len(tokenizer), scheme, gamma=gamma, z_threshold=z_threshold, min_tokens=min_tokens)
    results = []
    for ident, text in read_texts(path):
        d = wm.detect(tokenizer.encode(text))
        results.append({"id": ident, **d.to_json()})
    return results
