"""The streaming validator: every check, the accounting invariant, outputs and gates."""

import base64
import gzip
import json
import os

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from helpers import read_jsonl, sft, validate_lines, write_lines
from kfp_llmops.components.common import merkle
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.data_validation import run_to_dir
from kfp_llmops.components.data_validation.outputs import OutputPaths


def reasons(out):
    return {(q["line"], q["reason"], q["field"]) for q in read_jsonl(out / "quarantine.jsonl")}


def test_each_check_quarantines_with_line_reason_field_and_raw(tmp_path):
    lines = [
        sft(1),
        b'{"prompt": "a", "response": "b"',
        b'\xff\xfe{"prompt": 1}',
        b"",
        b"[1, 2]",
        {"prompt": "hi", "answer": "no response"},
        {"prompt": 5, "response": "x"},
        {"prompt": "x", "response": "   "},
        {"prompt": "p" * 9000, "response": "r"},
        sft(1),
        {"text": "A plain text record."},
        {"nothing": "matches"},
    ]
    result, out = validate_lines(tmp_path, lines * 1, overrides={"gate.max_reject_rate": 1.0})
    got = reasons(out)
    assert got == {
        (2, "json_error", None),
        (3, "decode_error", None),
        (4, "blank_line", None),
        (5, "not_object", None),
        (6, "missing_field", "response"),
        (7, "wrong_type", "prompt"),
        (8, "too_short", "response"),
        (9, "too_long", "prompt"),
        (10, "duplicate", None),
        (12, "missing_field", "prompt"),
    }
    quarantined = {q["line"]: q for q in read_jsonl(out / "quarantine.jsonl")}
    assert quarantined[2]["raw"] == '{"prompt": "a", "response": "b"'
    assert base64.b64decode(quarantined[3]["raw_b64"]) == b'\xff\xfe{"prompt": 1}'
    assert quarantined[10]["detail"] == "same text as line 1"
    m = result.metrics
    assert (m["rows_in"], m["rows_out"], m["rows_quarantined"]) == (12, 2, 10)
    assert read_jsonl(out / "clean.jsonl") == [sft(1), {"text": "A plain text record."}]


def test_accounting_invariant_and_metrics_file(tmp_path):
    lines = [sft(i) for i in range(50)] + [sft(3)] * 5 + [b"garbage"] * 3
    result, out = validate_lines(tmp_path, lines, overrides={"gate.max_reject_rate": 1.0})
    m = json.loads((out / "metrics.json").read_text())
    assert m["rows_in"] == m["rows_out"] + m["rows_quarantined"] == 58
    assert m["by_reason"] == {"duplicate": 5, "json_error": 3}
    assert len(read_jsonl(out / "clean.jsonl")) + len(read_jsonl(out / "quarantine.jsonl")) == 58


def test_duplicates_are_normalized(tmp_path):
    lines = [sft(1, "Hello   World?", "Yes."), sft(2, "  hello world? ", "YES."), sft(3, "ｈｅｌｌｏ world?", "yes.")]
    _, out = validate_lines(tmp_path, lines, overrides={"gate.max_reject_rate": 1.0})
    assert {r for _, r, _ in reasons(out)} == {"duplicate"}
    assert len(read_jsonl(out / "clean.jsonl")) == 1


def test_near_duplicates_only_when_enabled(tmp_path):
    base = "the quick brown fox jumps over the lazy dog near the quiet river bank at dawn today"
    lines = [
        sft(1, base, "ok"),
        sft(2, base.replace("today", "again"), "ok"),
        sft(3, "a completely different question about planets and stars in the night sky", "ok"),
    ]
    _, out = validate_lines(tmp_path, lines, overrides={"gate.max_reject_rate": 1.0})
    assert reasons(out) == set()
    _, out = validate_lines(
        tmp_path,
        lines,
        overrides={"gate.max_reject_rate": 1.0, "dedup.near.enabled": True, "dedup.near.threshold": 0.7},
    )
    assert reasons(out) == {(2, "near_duplicate", None)}


def test_pii_is_redacted_in_all_string_fields(tmp_path):
    lines = [
        {
            "prompt": "Mail me at a.b@example.com about the plan for the next week please",
            "response": "Sure, and my card 4111 1111 1111 1111 is the one to charge for it.",
            "meta": {"notes": ["call 415-555-0132 after lunch when you are free"]},
        }
    ]
    result, out = validate_lines(tmp_path, lines)
    (rec,) = read_jsonl(out / "clean.jsonl")
    assert "[EMAIL]" in rec["prompt"] and "[CREDIT_CARD]" in rec["response"]
    assert rec["meta"]["notes"] == ["call [PHONE] after lunch when you are free"]
    assert result.metrics["pii_redacted"] == {"CREDIT_CARD": 1, "EMAIL": 1, "PHONE": 1}


@pytest.mark.parametrize("policy,expect_reason", [("strict", "secret"), ("balanced", None), ("permissive", None)])
def test_secret_handling_per_policy(tmp_path, policy, expect_reason):
    lines = [sft(1, "Deploy with key AKIAIOSFODNN7EXAMPLE on the staging cluster tonight", "Done.")]
    _, out = validate_lines(tmp_path, lines, policy=policy, overrides={"gate.max_reject_rate": 1.0})
    if expect_reason:
        assert reasons(out) == {(1, "secret", "prompt")}
    else:
        assert "[CLOUD_KEY]" in read_jsonl(out / "clean.jsonl")[0]["prompt"]


def test_pii_density_quarantines_dumps_but_not_a_sentence(tmp_path):
    dump = sft(1, "a@example.com b@example.com c@example.com", "d@example.com")
    sentence = sft(2, "Please forward the quarterly report to finance@example.com before Friday noon.", "OK.")
    _, out = validate_lines(tmp_path, [dump, sentence], overrides={"gate.max_reject_rate": 1.0})
    assert reasons(out) == {(1, "pii_density", None)}


def test_policy_changes_what_is_redacted(tmp_path):
    lines = [sft(1, "Write to a.b@example.com about the weekly report and the numbers", "Will do.")]
    _, out = validate_lines(tmp_path, lines, policy="permissive")
    assert "a.b@example.com" in read_jsonl(out / "clean.jsonl")[0]["prompt"]


def test_gzip_input_and_merkle_root_matches_clean_bytes(tmp_path):
    src = tmp_path / "in.jsonl.gz"
    with gzip.open(src, "wb") as handle:
        for i in range(300):
            handle.write(json.dumps(sft(i)).encode() + b"\n")
    out = tmp_path / "out"
    result = run_to_dir(str(src), str(out), show_progress=False, overrides={"chunk_size": 4096})
    assert result.passed and result.metrics["input_compressed"]
    digest = merkle.hash_file(out / "clean.jsonl", "clean.jsonl", chunk_size=4096)
    assert merkle.Manifest(4096, [digest]).root.hex() == result.root
    assert not list(out.glob("*.partial"))


def test_overlong_line_is_streamed_whole_into_quarantine(tmp_path):
    big = json.dumps(sft(1, "x" * 5000)).encode()
    lines = [sft(0), big, sft(2)]
    result, out = validate_lines(
        tmp_path, lines, overrides={"schema.max_line_bytes": 1000, "gate.max_reject_rate": 1.0}
    )
    (q,) = read_jsonl(out / "quarantine.jsonl")
    assert q["reason"] == "line_too_long" and q["line"] == 2
    assert base64.b64decode(q["raw_b64"]) == big and q["bytes"] == len(big)
    assert result.metrics["rows_in"] == 3 and result.metrics["rows_out"] == 2


def test_bom_and_crlf_are_accepted(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\xef\xbb\xbf" + json.dumps(sft(1)).encode() + b"\r\n" + json.dumps(sft(2)).encode() + b"\r\n")
    result = run_to_dir(str(src), str(tmp_path / "o"), show_progress=False)
    assert result.metrics["rows_out"] == 2


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda p: None, "no such file"),
        (lambda p: p.mkdir(), "the folder holds no data files"),
        (lambda p: p.write_bytes(b""), "empty file"),
        (lambda p: p.write_bytes(b"\x00\x01\x02binary"), "binary data"),
        (lambda p: p.write_bytes(gzip.compress(b"")), "empty file"),
        (lambda p: p.write_bytes(b"\x1f\x8b\x08\x00garbage"), "gzip"),
    ],
)
def test_unusable_input_is_one_clear_error(tmp_path, make, message):
    path = tmp_path / "input.jsonl"
    make(path)
    with pytest.raises(InputError) as err:
        run_to_dir(str(path), str(tmp_path / "out"), show_progress=False)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert str(path) in str(err.value)


def test_truncated_gzip_midway_leaves_no_partial_outputs(tmp_path):
    rows = (json.dumps(sft(i, os.urandom(40).hex())).encode() + b"\n" for i in range(20000))
    data = gzip.compress(b"".join(rows))
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    out = tmp_path / "out"
    with pytest.raises(InputError, match="broken after line"):
        run_to_dir(str(path), str(out), show_progress=False)
    assert not (out / "clean.jsonl").exists() and not list(out.glob("*.partial"))


def test_gate_fails_on_reject_rate_but_writes_outputs(tmp_path):
    lines = [sft(i) for i in range(90)] + [b"bad"] * 10
    result, out = validate_lines(tmp_path, lines)
    assert not result.passed and result.gate_reasons[0].startswith("reject_rate 0.1 (needs <= 0.05)")
    assert (out / "clean.jsonl").exists() and (out / "report.md").exists()
    assert "FAILED" in (out / "report.md").read_text()


def test_drift_against_own_stats_is_zero_and_shifted_data_fails(tmp_path):
    short = [sft(i) for i in range(200)]
    result, out = validate_lines(tmp_path, short)
    ref = str(tmp_path / "ref.json")
    os.replace(out / "stats.json", ref)
    same, _ = validate_lines(tmp_path, short, reference_stats=ref)
    assert same.passed and max(same.metrics["drift_psi"].values()) < 1e-9
    long = [sft(i, f"Question {i}? " + "word " * 300, "Answer.") for i in range(200)]
    shifted, _ = validate_lines(tmp_path, long, reference_stats=ref)
    assert not shifted.passed and shifted.metrics["drift_psi"]["length"] > 0.2
    assert any(r.startswith("psi_length ") and "drift of length" in r for r in shifted.gate_reasons)


def test_config_errors_name_file_line_and_field(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("gate:\n  max_reject_rate: 0.1\npii:\n  policy: paranoid\n")
    src = write_lines(tmp_path / "in.jsonl", [sft(1)])
    with pytest.raises(InputError) as err:
        run_to_dir(src, str(tmp_path / "o"), str(cfg), show_progress=False)
    assert str(err.value).startswith(f"{cfg}:4: pii.policy:")
    cfg.write_text("gate:\n  max_reject_rate: 0.1\n  max_rejet: 3\n")
    with pytest.raises(InputError, match=r"cfg.yaml:3: gate.max_rejet: Extra inputs"):
        run_to_dir(src, str(tmp_path / "o"), str(cfg), show_progress=False)
    cfg.write_text("gate: [unclosed\n")
    with pytest.raises(InputError, match=r"cfg.yaml:2: invalid YAML"):
        run_to_dir(src, str(tmp_path / "o"), str(cfg), show_progress=False)


def test_custom_schema_from_yaml(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        "schema:\n  allow_extra_fields: false\n  formats:\n  - name: qa\n    fields:\n"
        "      question: {max_chars: 20}\n      answer: {}\n"
    )
    src = write_lines(
        tmp_path / "in.jsonl",
        [
            {"question": "q?", "answer": "a"},
            {"question": "q" * 30, "answer": "a"},
            {"question": "q2?", "answer": "a", "extra": 1},
        ],
    )
    out = tmp_path / "o"
    run_to_dir(src, str(out), str(cfg), show_progress=False, overrides={"gate.max_reject_rate": 1.0})
    assert reasons(out) == {(2, "too_long", "question"), (3, "unexpected_field", "extra")}


def test_one_nul_byte_line_is_quarantined_not_the_whole_file(tmp_path):
    good = [f'{{"prompt": "question {i}?", "response": "answer {i}, long enough to pass"}}' for i in range(50)]
    lines = good[:20] + ['{"prompt": "a\x00b?", "response": "binary inside"}'] + good[20:]
    src = tmp_path / "in.jsonl"
    src.write_bytes(("\n".join(lines) + "\n").encode())
    result = run_to_dir(str(src), str(tmp_path / "o"), show_progress=False)
    quarantined = [json.loads(line) for line in (tmp_path / "o" / "quarantine.jsonl").read_text().splitlines()]
    assert [(q["line"], q["reason"]) for q in quarantined] == [(21, "nul_byte")]
    assert result.metrics["rows_out"] == 50


def test_the_component_checks_the_raw_root_its_cache_key_holds_and_writes_only_its_outputs(tmp_path):
    """KFP may cache validate_dataset by the raw data's root: the bytes it validates must be
    the ones that root names, and it writes nothing outside its artifacts."""
    from kfp_llmops.components.common import integrity, records
    from kfp_llmops.components.data_validation import run_component
    from kfp_llmops.pipelines.standalone.runner import FileArtifact

    raw = write_lines(tmp_path / "raw.jsonl", [sft(i) for i in range(50)])
    root = integrity.seal("dataset", raw)
    out = tmp_path / "out"
    out.mkdir()
    arts = {n: FileArtifact(str(out / n)) for n in ("clean", "quarantine", "stats", "metrics", "report", "note")}
    before = set(os.listdir(tmp_path))
    given = dict(config="", policy="balanced", reference_stats=None, baseline_release="none", raw_root=root)
    assert run_component(raw=FileArtifact(raw), **given, **arts).passed
    assert set(os.listdir(tmp_path)) == before  # outputs only, no shared folder
    note = records.read(str(out / "note"))
    assert note.outputs.clean.root == arts["clean"].metadata["merkle_root"]
    assert note.outputs.stats.root == integrity.sha256_file(str(out / "stats"))
    write_lines(raw, [sft(i) for i in range(51)])  # the data changed after it was fingerprinted
    with pytest.raises(InputError, match="raw.jsonl: Merkle root .* does not match"):
        run_component(raw=FileArtifact(raw), **given, **arts)


_PIECES = [
    json.dumps(sft(7)).encode(),
    json.dumps(sft(8, "y" * 90)).encode(),
    json.dumps(sft(9, "z" * 400)).encode(),
    b"",
    b"not json",
    b'{"prompt": "a@example.com", "response": "mail"}',
]


@settings(max_examples=80, deadline=None)
@example([_PIECES[0], _PIECES[2], _PIECES[1]] * 3, b"\n", 4096, 100, False)  # too long, inside the buffer
@example([_PIECES[1]] * 9, b"\r\n", 64, 300, True)  # every line cut by the buffer
@example([_PIECES[0], _PIECES[2]], b"", 4096, 300, False)  # too long, last, no newline
@given(
    lines=st.lists(st.sampled_from(_PIECES) | st.binary(max_size=120), min_size=1, max_size=50),
    end=st.sampled_from([b"\n", b"\r\n", b""]),
    buffer=st.sampled_from([64, 100, 257, 4096]),
    max_line=st.sampled_from([64, 100, 300, 1 << 20]),
    compressed=st.booleans(),
)
def test_lines_taken_from_the_buffer_are_the_lines_readline_gives(lines, end, buffer, max_line, compressed):
    """The validator takes the whole lines its reader has buffered in one piece: every
    output (and every error) equals reading one line at a time, wherever the buffer cuts
    a line, with over-long lines, CRLF, binary junk and no final newline."""
    import importlib
    import tempfile

    from kfp_llmops.components.data_validation import reader
    from kfp_llmops.components.data_validation.config import DataValidationConfig

    engines = importlib.import_module("kfp_llmops.components.data_validation.engines")
    config = DataValidationConfig()
    config.pii.names.enabled = False
    config.gate.max_reject_rate = 1.0
    config.schema_.max_line_bytes = max_line
    data = b"\n".join(lines) + end
    got = []
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        path = os.path.join(tmp, "in.jsonl")
        with open(path, "wb") as handle:
            handle.write(gzip.compress(data) if compressed else data)
        patch.setattr(reader, "BUFFER", buffer)
        for peek in (True, False):
            patch.setattr(reader, "PEEK", peek)
            out = OutputPaths.in_dir(os.path.join(tmp, f"out-{peek}"))
            try:
                result = engines.validate(path, out, config, show_progress=False)
            except InputError as exc:
                got.append(str(exc))
                continue
            metrics = {k: v for k, v in result.metrics.items() if k != "elapsed_s"}
            got.append([open(p, "rb").read() for p in (out.clean, out.quarantine, out.stats)] + [metrics])
    assert got[0] == got[1]
