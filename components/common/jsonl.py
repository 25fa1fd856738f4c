"""Reading small JSONL inputs (eval sets, text files) with one-line errors that name the
file and line. The eval set is read here because evaluation and watermark verification
both prompt with it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

from .conversation import TurnError, check_turns, split_last
from .errors import InputError


def iter_objects(path: str, what: str = "file") -> Iterator[tuple[int, dict]]:
    """(1-based line number, object) for each non-blank line; any other value is an error."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: {what} not found")
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
            if not isinstance(row, dict):
                raise InputError(f"{path}:{n}: expected a JSON object")
            yield n, row


def read_eval_set(path: str) -> list[dict]:
    """`{"id", "prompt", "response"}` rows: a prompt and its reference answer each. A
    `messages` record is prompted with its conversation up to the last assistant turn,
    which is the reference; `prompt`/`completion` reads as `prompt`/`response`."""
    rows = []
    for n, row in iter_objects(path, "eval dataset"):
        if "messages" in row:
            try:
                prompt, reference = split_last(check_turns(row["messages"]))
            except TurnError as exc:
                raise InputError(f"{path}:{n}: {exc}") from None
        else:
            answer = "completion" if "completion" in row and "response" not in row else "response"
            for field in ("prompt", answer):
                if not isinstance(row.get(field), str) or not row[field].strip():
                    raise InputError(
                        f"{path}:{n}: field {field!r} is missing or empty (eval rows need a prompt and "
                        "a reference response, or messages ending with the assistant's)"
                    )
            prompt, reference = row["prompt"], row[answer]
        rows.append({"id": str(row.get("id", f"row-{n}")), "prompt": prompt, "response": reference})
    if not rows:
        raise InputError(f"{path}: empty eval set")
    return rows
