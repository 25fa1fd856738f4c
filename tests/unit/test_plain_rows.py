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

from kfp_llmops.components.common.errors import EnvironmentProblem
from kfp_llmops.components.data_validation import plain_rows
from kfp_llmops.components.data_validation.config import DataValidationConfig
from kfp_llmops.components.data_validation.dedup import fingerprint, normalize

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


# Past ASCII: characters the table takes (CJK, kana, Hangul, fullwidth forms, letters
# that fold or decompose) and ones it leaves to Python (combining marks, Hangul vowels,
# spaces, a form longer than its character, surrogates, a plane past the BMP).
_UNICODE = list("é中，Ａａ：ß΅ΣςЖжﬁ㎏한가ᄀ") + ["\u0301", "\u1161", "\u3000", "\u00a0", "\u2028", "İ", "\ufdfa", "😀"]
_chars = st.sampled_from(list('ab AZ09/"\\\t\n\r\x08\x0c\x0b\x1c\x1f\x7f.,:{}[]') + ["\x00"] + _UNICODE)
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


_CJK = st.text(st.sampled_from(list("中文问题的地址是，：。！？（）ＡＢ１２ abc.")), max_size=30)


@settings(max_examples=500, deadline=None)
@given(rows=st.lists(st.tuples(_CJK, _CJK), min_size=1, max_size=5), escaped=st.booleans())
def test_cjk_rows_as_writers_write_them_are_claimed(rows, escaped):
    """Chinese text with fullwidth punctuation, raw UTF-8 or \\u-escaped, is C's."""
    lines = [json.dumps({"prompt": p + "?", "response": r + "ok"}, ensure_ascii=escaped).encode() for p, r in rows]
    for raw, got, want in zip(lines, _c(lines), map(_python, lines), strict=True):
        assert want is not None and got == want, raw


def test_the_unicode_table_holds_each_characters_normalized_form():
    """Every BMP character the table takes normalizes alone to its entry (or to itself),
    no longer in UTF-8, with no whitespace; and no character past the BMP composes with
    one it takes (the BMP scan that finds the composing ones misses none)."""
    import unicodedata

    table, pool = plain_rows.unicode_table()
    taken = 0
    for cp in range(0x80, 0x10000):
        e = int(table[cp])
        if not e & 1:
            continue
        taken += 1
        ch = chr(cp)
        form = pool[e >> 8 : (e >> 8) + (e >> 2 & 63)].decode() if e & 2 else ch
        assert normalize(ch) == form, hex(cp)
        assert len(form.encode()) <= len(ch.encode()) and not any(x.isspace() for x in form)
    assert taken > 60000
    for cp in range(0x10000, 0x110000):
        d = unicodedata.decomposition(chr(cp))
        if d and not d.startswith("<") and len(d.split()) == 2:
            assert not table[int(d.split()[1], 16)] & 1 if int(d.split()[1], 16) < 0x10000 else True, hex(cp)


_MIXED = list("aZ  1.") + _UNICODE + list("ḁ\u0327Ǆǅǆ\u0345ΐ\u1100\u11a8\u0cd5")  # combining, jamo, titlecase


@settings(max_examples=2000, deadline=None)
@given(text=st.text(st.sampled_from(_MIXED), max_size=20))
def test_text_of_taken_characters_normalizes_as_each_one_does(text):
    """`normalize` of a line the table takes is the concatenation its characters' forms
    give (what plain_rows.c computes): no composition across characters."""
    lines = [orjson.dumps({"prompt": text + "?", "response": "ok"})]
    got = _c(lines)[0]
    if got is not None:
        assert got == _python(lines[0])


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


def test_the_extension_runs_only_as_built_from_the_sources_beside_it(monkeypatch):
    """The library carries the digest of the C it was built from (setup.py); one built
    from other sources (an edit since the install, a planted file) is refused in one line."""
    lib = plain_rows.library()
    assert lib.plain_rows_sources().decode() == plain_rows.sources_digest() != ""
    monkeypatch.setattr(plain_rows, "_loaded", {})
    monkeypatch.setattr(plain_rows, "sources_digest", lambda: "0" * 64)
    with pytest.raises(EnvironmentProblem, match="built from other sources") as caught:
        plain_rows.library()
    assert "\n" not in str(caught.value) and plain_rows.DISABLE in str(caught.value)


def test_without_the_extension_the_stage_says_so_and_runs_python_only_when_asked(tmp_path, monkeypatch):
    """An installed package without its extension stops the data stage with one line that
    says what to do, before any output is written; LLMOPS_PURE_PYTHON=1 runs the Python
    path, which writes what C does."""
    from kfp_llmops.components.data_validation import run_to_dir

    corpus = tmp_path / "in.jsonl"
    corpus.write_text("".join(json.dumps({"prompt": f"question {i}", "response": "été"}) + "\n" for i in range(50)))
    with_c = run_to_dir(str(corpus), str(tmp_path / "c"), show_progress=False)
    monkeypatch.setattr(plain_rows, "_loaded", {})
    monkeypatch.setattr(plain_rows, "extension_path", lambda: None)
    with pytest.raises(EnvironmentProblem, match="C extension .* is not installed") as caught:
        run_to_dir(str(corpus), str(tmp_path / "none"), show_progress=False)
    assert "\n" not in str(caught.value) and "LLMOPS_PURE_PYTHON=1" in str(caught.value)
    assert not os.path.exists(tmp_path / "none" / "clean.jsonl")
    monkeypatch.setenv(plain_rows.DISABLE, "1")
    in_python = run_to_dir(str(corpus), str(tmp_path / "python"), show_progress=False)
    assert in_python.metrics["merkle_root"] == with_c.metrics["merkle_root"]
    assert (tmp_path / "python" / "clean.jsonl").read_bytes() == (tmp_path / "c" / "clean.jsonl").read_bytes()


def test_a_unicode_table_that_points_outside_its_pool_is_refused_by_the_c_side():
    """Entries naming forms longer than their characters or past the pool are refused
    before any row is scanned; the table built here is taken."""
    table, pool = plain_rows.unicode_table()
    bad = table.copy()
    cp = 0x00C9  # É: folds to é, 2 bytes
    bad[cp] = 1 | 2 | 40 << 2 | (len(pool) + 1000) << 8
    lib = plain_rows.library()
    assert lib.plain_rows_unicode(bad, pool, len(pool)) == cp
    assert lib.plain_rows_unicode(table, pool, len(pool)) == -1
    plain_rows._loaded["unicode"] = (table, pool)  # what C now reads stays alive


def test_the_c_functions_take_arrays_of_their_own_types_only():
    """The entry points are typed: an array of another element type, shape or layout, or
    a bare address, is refused by ctypes before C reads it."""
    import ctypes

    import numpy as np

    table, pool = plain_rows.unicode_table()
    lib = plain_rows.library()
    for wrong in (table.astype(np.int64), table[::2], table.reshape(256, 256), table.ctypes.data):
        with pytest.raises(ctypes.ArgumentError):
            lib.plain_rows_unicode(wrong, pool, len(pool))
    assert lib.plain_rows_unicode(table, pool, len(pool)) == -1
    plain_rows._loaded["unicode"] = (table, pool)
