"""Schema checks: one line decoded, parsed and held to the record formats, or a
`Rejected` verdict naming the reason (`REASONS`), the field and what was wrong; and what
dedup compares of a record.
"""

from __future__ import annotations

from typing import Any

import orjson

from kfp_llmops.components.common.conversation import TurnError, check_turns

from .config import RecordFormat, SchemaConfig
from .dedup import normalize

REASONS = {
    "decode_error": "bytes are not valid UTF-8",
    "nul_byte": "the line holds a NUL byte (binary data, not text)",
    "blank_line": "the line is empty or only whitespace",
    "line_too_long": "the line is longer than schema.max_line_bytes",
    "json_error": "the line is not valid JSON",
    "not_object": "the JSON value is not an object",
    "missing_field": "a required field is absent (or no record format matches)",
    "wrong_type": "a field has the wrong type",
    "unexpected_field": "a field not in the schema (schema.allow_extra_fields is false)",
    "too_short": "a field is shorter than its min_chars",
    "too_long": "a field is longer than its max_chars",
    "unknown_role": "a conversation turn's role is not system, user or assistant",
    "empty_turn": "a conversation turn has no text",
    "bad_turn": "a conversation turn is not a {role, content} object, a system turn is not first, or no user turn",
    "no_assistant_turn": "the conversation does not end with an assistant turn (SFT trains on the assistant's)",
    "duplicate": "same normalized text as an earlier row",
    "near_duplicate": "MinHash-similar to an earlier row",
    "secret": "contains a secret and the policy quarantines secrets",
    "pii_density": "more of the record's words are PII than the policy allows",
}


class Rejected(Exception):
    """A line's verdict: quarantined for `reason` (one of `REASONS`), at `field`, with
    `detail` saying what was wrong."""

    def __init__(self, reason: str, field: str | None = None, detail: str = ""):
        self.reason, self.field, self.detail = reason, field, detail

    def kept(self) -> Rejected:
        """This verdict, to be kept past its `except`: without the traceback (and the
        parse error behind it) whose frames hold the block it came from in a reference
        cycle, which only the garbage collector would free."""
        self.__context__ = None
        return self.with_traceback(None)


class Schema:
    """The record formats of a run, as each line is held to them."""

    def __init__(self, config: SchemaConfig):
        self.formats = config.formats
        self.allow_extra_fields = config.allow_extra_fields
        self._format_keys = [(fmt, set(fmt.fields)) for fmt in self.formats]
        # Per format, its fields' (name, min_chars, max_chars) when all are strings: the
        # records the block parse can judge on its lean path.
        self.plain = [
            (
                keys,
                fmt,
                None
                if any(spec.type != "string" for spec in fmt.fields.values())
                else [(name, spec.min_chars, spec.max_chars) for name, spec in fmt.fields.items()],
            )
            for fmt, keys in self._format_keys
        ]

    def parse(self, raw: bytes, first_line: bool) -> tuple[dict, RecordFormat]:
        """Decode, parse and check the schema of one line, or raise Rejected."""
        nul = raw.find(b"\x00")
        if nul >= 0:
            raise Rejected("nul_byte", None, f"NUL at byte {nul}")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Rejected("decode_error", None, f"invalid UTF-8 at byte {exc.start}") from None
        if first_line and text.startswith("\ufeff"):
            text = text[1:]
        if not text.strip():
            raise Rejected("blank_line")
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise Rejected("json_error", None, str(exc).split(":")[0][:120]) from None
        return obj, self.check(obj)

    def _match_format(self, obj: dict) -> RecordFormat:
        for fmt, names in self._format_keys:  # fast path: exactly a format's fields
            if obj.keys() == names:
                return fmt
        best, best_hits = None, 0
        for fmt in self.formats:
            hits = sum(1 for name in fmt.fields if name in obj)
            if hits > best_hits:
                best, best_hits = fmt, hits
        if best is None:
            expected = " or ".join("+".join(f.fields) for f in self.formats)
            first = next(iter(self.formats[0].fields))
            raise Rejected("missing_field", first, f"no record format matches; expected {expected}")
        return best

    def check(self, obj: Any) -> RecordFormat:
        if not isinstance(obj, dict):
            raise Rejected("not_object", None, f"got {type(obj).__name__}")
        fmt = self._match_format(obj)
        for name, spec in fmt.fields.items():
            value = obj.get(name)
            if value is None:
                if spec.required:
                    raise Rejected("missing_field", name, f"format {fmt.name} requires {name!r}")
                continue
            if spec.type == "messages":
                _check_conversation(value, name, spec)
                continue
            if not isinstance(value, str):
                raise Rejected("wrong_type", name, f"expected string, got {type(value).__name__}")
            n = len(value.strip())
            if n < spec.min_chars:
                raise Rejected("too_short", name, f"{n} < min_chars {spec.min_chars}")
            if len(value) > spec.max_chars:
                raise Rejected("too_long", name, f"{len(value)} > max_chars {spec.max_chars}")
        if not self.allow_extra_fields:
            extra = [k for k in obj if k not in fmt.fields]
            if extra:
                raise Rejected("unexpected_field", extra[0], f"format {fmt.name} has no field {extra[0]!r}")
        return fmt


def dedup_text(obj: dict, fmt: RecordFormat) -> str:
    """What dedup compares: the format's fields, normalized, in order."""
    return "\x1f".join(_field_text(obj[name]) for name in fmt.fields if obj.get(name) is not None)


def _check_conversation(value: Any, name: str, spec) -> None:
    try:
        turns = check_turns(value, name, spec.min_chars)
    except TurnError as exc:
        raise Rejected(exc.reason, exc.field, exc.detail) from None
    total = sum(len(t["content"]) for t in turns)
    if total > spec.max_chars:
        raise Rejected("too_long", name, f"{total} characters in {len(turns)} turns > max_chars {spec.max_chars}")


def _field_text(value: Any) -> str:
    """A field as dedup compares it: a string normalized, a conversation as its rendered
    turns (role and normalized content), so the same words in other turns differ."""
    if isinstance(value, str):
        return normalize(value)
    return "\x1e".join(f"{t['role']}:{normalize(t['content'])}" for t in value)


def field_chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(len(t["content"]) for t in value)
    return 0
