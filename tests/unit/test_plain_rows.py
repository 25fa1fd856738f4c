"""plain_rows.c against the Python it stands in for: a line it claims is one the Python
path reads as plain, with the same clean bytes, character count and dedup key; a plain
line as writers write it is claimed; its BLAKE2b is hashlib's."""

import hashlib
import json
import os

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kfp_llmops.components.data_validation import plain_rows
from kfp_llmops.components.data_validation.config import DataValidationConfig
from kfp_llmops.components.data_validation.dedup import fingerprint, normalize

pytestmark = pytest.mark.skipif(plain_rows.load() is None, reason="no C compiler: the Python path alone")

FORMATS = DataValidationConfig().schema_.formats


def _python(raw: bytes):
    """What the Python path makes of a line as plain: (format index, clean bytes, chars,
    key), or None where it is not plain (parse_lines' check)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(obj) is not dict:
        return None
    for k, fmt in enumerate(FORMATS):
        if obj.keys() != set(fmt.fields):
            continue
        values = []
        for name, spec in fmt.fields.items():
            value = obj[name]
            if spec.type != "string" or type(value) is not str or len(value) > spec.max_chars:
                return None
            if spec.min_chars and len(value.strip()) < spec.min_chars:
                return None
            values.append(value)
        key = fingerprint("\x1f".join(map(normalize, values)))
        return k, orjson.dumps(obj) + b"\n", sum(map(len, values)), key
    return None


def _c(lines: list[bytes]):
    buf, status, chars, keys, offsets = plain_rows.scan(plain_rows.load(), lines, plain_rows.Formats(FORMATS))
    return [
        None if status[i] < 0 else (int(status[i]), buf[offsets[i] : offsets[i + 1]], int(chars[i]), int(keys[i]))
        for i in range(len(lines))
    ]


_chars = st.sampled_from(list('ab AZ09/"\\\t\n\r\x08\x0c\x0b\x1c\x1f\x7f.,:{}[]') + ["é", "中", "\x00", "\u2028"])
_text = st.text(_chars, max_size=12)
_key = st.sampled_from(["prompt", "response", "text", "messages", "x", "Prompt"])
_value = st.one_of(_text, _text, st.integers(-(2**40), 2**40), st.none(), st.lists(_text, max_size=2))
_ws = st.sampled_from(["", "", " ", "\t", "\r", "  ", "\n"])


@st.composite
def _line(draw) -> bytes:
    """Objects of the formats' keys (and others, repeated, missing), written with and
    without escapes and whitespace, sometimes cut short or spliced."""
    pairs = draw(st.lists(st.tuples(_key, _value), min_size=0, max_size=4))
    how = draw(st.integers(0, 3))
    if how == 0:
        raw = orjson.dumps(dict(pairs))
    elif how == 1:
        raw = json.dumps(dict(pairs), ensure_ascii=draw(st.booleans())).encode()
    else:  # by hand: duplicate keys kept, whitespace anywhere, escapes of every kind
        w = [draw(_ws) for _ in range(6)]
        parts = [
            f"{w[0]}{json.dumps(k)}{w[1]}:{w[2]}{json.dumps(v, ensure_ascii=how == 2)}{w[3]}".replace(
                "/", "\\/" if draw(st.booleans()) else "/"
            )
            for k, v in pairs
        ]
        raw = (w[4] + "{" + ",".join(parts) + "}" + w[5]).encode()
    cut = draw(st.integers(0, 3))
    if cut == 0 and raw:
        raw = raw[: draw(st.integers(0, len(raw)))]
    return raw.replace(b"\n", b" ")


@settings(max_examples=3000, deadline=None)
@given(lines=st.lists(_line(), min_size=1, max_size=6))
@example(
    lines=[b'{"prompt":"a","prompt":"b"}', b'{"text":"a","text":"b"}', b'{"prompt":"a","response":"b","prompt":"c"}']
)
@example(lines=[b'{"prompt":"a\\u0062","response":"b"}', b' {"response" : "b\\/" ,\t"prompt":"A  B\\t"}\r'])
def test_a_claimed_line_is_what_python_makes_of_it(lines):
    for raw, got in zip(lines, _c(lines), strict=True):
        if got is not None:
            assert got == _python(raw), raw


@settings(max_examples=500, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.text(st.characters(max_codepoint=127), min_size=1, max_size=40), _text), min_size=1, max_size=5
    ),
    spaced=st.booleans(),
)
def test_plain_ascii_rows_as_writers_write_them_are_claimed(rows, spaced):
    lines = []
    for prompt, response in rows:
        row = {"response": response + "ok", "prompt": prompt + "?"}
        lines.append(json.dumps(row).encode() if spaced else orjson.dumps(row))
    for raw, got, want in zip(lines, _c(lines), map(_python, lines), strict=True):
        if want is not None and raw.isascii() and b"\\u" not in raw:
            assert got == want, raw


def test_its_blake2b_is_hashlibs():
    for n in (0, 1, 63, 127, 128, 129, 255, 256, 257, 1000):
        for _ in range(5):
            data = os.urandom(n)
            want = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
            assert plain_rows.blake2b_64(data) == want, n


def test_a_different_format_list_changes_what_is_claimed():
    """The format list the validator was given, not a built-in one: a config whose
    format wants a longer prompt leaves the short one to Python (which rejects it)."""
    config = DataValidationConfig.load(
        "schema:\n  formats:\n    - name: sft\n      fields:\n        prompt: {type: string, min_chars: 5}\n"
        "        response: {type: string}\n"
    )
    lines = [b'{"prompt": "long enough", "response": "r"}', b'{"prompt": "  ab ", "response": "r"}']
    buf, status, *_ = plain_rows.scan(plain_rows.load(), lines, plain_rows.Formats(config.schema_.formats))
    assert status.tolist() == [0, -1]


def test_without_a_compiler_the_validator_says_so_once_and_runs_its_python_path(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(plain_rows, "_loaded", {})
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    assert plain_rows.load() is None and plain_rows.load() is None
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "plain rows in C unavailable" in said[0] and "the Python path" in said[0], said
    monkeypatch.setenv("CC", "cc")
    monkeypatch.setattr(plain_rows, "_loaded", {})
    assert plain_rows.load() is not None  # built into the empty cache
    assert os.listdir(tmp_path / "cache" / "kfp-llmops") == [plain_rows._library_name()]
