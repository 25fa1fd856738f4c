"""Property tests: no input crashes the validator, and every row is accounted for."""

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.data_validation import pii
from kfp_llmops.components.data_validation.config import DataValidationConfig
from kfp_llmops.components.data_validation.engines import validate
from kfp_llmops.components.data_validation.outputs import OutputPaths
from kfp_llmops.components.data_validation.reader import _CONTROL, _PROBE, BINARY_SHARE

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["prompt", "response", "text", "x"]), inner, max_size=4)
    ),
    max_leaves=8,
)
_lines = st.one_of(
    st.binary(max_size=80).map(lambda b: b.replace(b"\n", b"")),
    _json_values.map(lambda v: json.dumps(v).encode()),
    st.tuples(st.text(max_size=60), st.text(max_size=60)).map(
        lambda t: json.dumps({"prompt": t[0], "response": t[1]}).encode()
    ),
    st.sampled_from([b"", b"  ", b'{"prompt": "a@b.co 4111 1111 1111 1111", "response": "ok"}']),
)


def _mostly_binary(data: bytes) -> bool:
    head = data[:_PROBE]
    return len(head) - len(head.translate(None, _CONTROL)) > BINARY_SHARE * len(head)


def _run(tmp_path, data: bytes, config=None):
    src = tmp_path / "in.jsonl"
    src.write_bytes(data)
    outputs = OutputPaths.in_dir(str(tmp_path / "out"))
    return validate(str(src), outputs, config or DataValidationConfig(), show_progress=False)


@SETTINGS
@given(data=st.binary(max_size=2000))
def test_arbitrary_bytes_never_crash(tmp_path, data):
    try:
        result = _run(tmp_path, data)
    except InputError as err:  # unusable input only: a clean, one-line error
        assert "\n" not in str(err)
        assert (
            (not data and "empty file" in str(err))
            or (_mostly_binary(data) and "binary data" in str(err))
            or (data.startswith(b"\x1f\x8b") and ("gzip" in str(err) or "empty file" in str(err)))
        )
        return
    m = result.metrics
    assert m["rows_in"] == m["rows_out"] + m["rows_quarantined"]
    assert m["rows_in"] == data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


@SETTINGS
@given(lines=st.lists(_lines, min_size=1, max_size=40), near=st.booleans())
@example(lines=[b'{"prompt": "p", "response": "r"}'] * 3 + [b'{"prompt": "a\x00b", "response": "r"}'], near=False)
@example(lines=[b"\x1f\x8b", b"\r     "], near=False)
def test_accounting_invariant_holds(tmp_path, lines, near):
    data = b"\n".join(lines) + b"\n"
    config = DataValidationConfig()
    config.dedup.near.enabled = near
    if data.startswith(b"\x1f\x8b"):  # gzip's magic: read as gzip, refused whole when it is not
        with pytest.raises(InputError, match="gzip"):
            _run(tmp_path, data, config)
        return
    if _mostly_binary(data):  # refused whole, one line naming why; nothing else is
        with pytest.raises(InputError, match="binary data"):
            _run(tmp_path, data, config)
        return
    result = _run(tmp_path, data, config)
    m = result.metrics
    assert m["rows_in"] == len(lines) == m["rows_out"] + m["rows_quarantined"]
    clean = (tmp_path / "out" / "clean.jsonl").read_bytes().splitlines()
    quarantine = (tmp_path / "out" / "quarantine.jsonl").read_bytes().splitlines()
    assert len(clean) == m["rows_out"] and len(quarantine) == m["rows_quarantined"]
    assert sorted(json.loads(q)["line"] for q in quarantine) == sorted(set(json.loads(q)["line"] for q in quarantine))
    nul_lines = {n for n, line in enumerate(lines, 1) if b"\x00" in line}
    assert nul_lines == {json.loads(q)["line"] for q in quarantine if json.loads(q)["reason"] == "nul_byte"}


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=300))
def test_pii_findings_are_ordered_disjoint_and_redaction_is_stable(text):
    findings = pii.find_pii(text)
    for a, b in zip(findings, findings[1:], strict=False):
        assert a.end <= b.start
    redacted = pii.redact(text, findings, frozenset(pii.ALL_TYPES))
    # Everything outside the findings survives, in order; each finding becomes one token.
    kept = "".join(
        text[a.end : b.start]
        for a, b in zip(
            [pii.Finding(0, 0, "")] + findings, findings + [pii.Finding(len(text), len(text), "")], strict=False
        )
    )
    assert redacted.count("[") - text.count("[") == len(findings)
    stripped = redacted
    for f in findings:
        stripped = stripped.replace(f"[{f.type}]", "", 1)
    assert stripped == kept
