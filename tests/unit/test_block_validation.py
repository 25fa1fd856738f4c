"""The names-off validator judges a block of lines at once (`Validator.check_lines`): every
line's outcome, the dedup indexes' answers and the statistics must be what `check` gives
one line at a time, whatever rows a block holds and wherever blocks split."""

import importlib
import json
import random
import unicodedata

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kfp_llmops.components.data_validation import pii, pii_rows, plain_rows
from kfp_llmops.components.data_validation import stream as streaming
from kfp_llmops.components.data_validation.blocks import Validator
from kfp_llmops.components.data_validation.candidates import NONE, candidate_lines, line_kinds
from kfp_llmops.components.data_validation.config import DataValidationConfig
from kfp_llmops.components.data_validation.dedup import FingerprintIndex, normalize
from kfp_llmops.components.data_validation.drift import DataStats
from kfp_llmops.components.data_validation.outputs import OutputPaths
from kfp_llmops.components.data_validation.schema import Rejected
from tests import pii_corpus, row_at_a_time

engines = importlib.import_module("kfp_llmops.components.data_validation.engines")


def _rows(n: int, seed: int) -> list[bytes]:
    """Plain rows, repeats (exact and after normalization), PII, secrets, every schema
    failure, other formats, conversations, extra fields, escapes and a BOM first."""
    rng = random.Random(seed)
    extras = [s.text for s in pii_corpus.labeled_samples(300, seed=seed)]
    rows: list[bytes] = [b'\xef\xbb\xbf{"prompt": "opens the file", "response": "with a BOM"}']
    for i in range(n):
        roll = rng.random()
        prompt = f"Question {i % 97}: what is {rng.choice(['up', 'new', 'it'])}?"
        if roll < 0.25:
            prompt += " " + rng.choice(extras)
        row = {"prompt": prompt, "response": rng.choice(["Fine.", "It is.", "  Spaced   out  "])}
        kind = rng.randrange(24)
        if kind == 0 and rows:
            rows.append(rng.choice(rows))  # an exact repeat
            continue
        if kind == 1:
            row["prompt"] = row["prompt"].upper() + "   "  # the same after normalization
        elif kind == 2:
            rows.append(json.dumps(row)[:-3].encode())  # malformed
            continue
        elif kind == 3:
            row["response"] = "   "  # too short
        elif kind == 4:
            row["prompt"] = "x" * 9000  # too long
        elif kind == 5:
            row["response"] = 7  # wrong type
        elif kind == 6:
            row = {"text": prompt}
        elif kind == 7:
            row = {"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": "Yes."}]}
        elif kind == 8:
            row["note"] = "an extra field"
        elif kind == 9:
            row["response"] = None
        elif kind == 10:
            rows.append(b"")
            continue
        elif kind == 11:
            rows.append(b"[1, 2]")
            continue
        elif kind == 12:
            rows.append(json.dumps(row, ensure_ascii=True).replace("a", "\\u0061").encode())
            continue
        elif kind == 13:
            rows.append(b"\xff" + orjson.dumps(row))
            continue
        elif kind == 14:
            row["prompt"] += " " + "中文 问题"
        elif kind == 15:
            row["prompt"] = f"a{i}@example.com b{i}@example.org +44 20 7946 0{i % 1000:03d} c@example.net"
        rows.append(orjson.dumps(row) if rng.random() < 0.5 else json.dumps(row).encode())
    return rows


def _outcome(o):
    return o if isinstance(o, bytes) else (o.reason, o.field, o.detail)


def _one_at_a_time(config, rows):
    v = Validator(config)
    out = []
    for n, raw in enumerate(rows, 1):
        try:
            out.append(orjson.dumps(row_at_a_time.check(v, raw, n)) + b"\n")
        except Rejected as rej:
            out.append(rej)
    return [_outcome(o) for o in out], v


def _in_blocks(config, rows, size):
    v = Validator(config)
    out = []
    for start in range(0, len(rows), size):
        block = rows[start : start + size]
        lengths: list[int] = []
        out += v.check_lines(block, start + 1, candidate_lines(block), lengths)
        v.stats.add_lengths(lengths)
    return [_outcome(o) for o in out], v


@pytest.mark.parametrize("near", [False, True])
@pytest.mark.parametrize("policy", ["balanced", "strict"])
@pytest.mark.parametrize("in_c", [True, False], ids=["plain-rows-in-C", "python"])
def test_blocks_judge_every_line_as_one_at_a_time(near, policy, in_c, monkeypatch):
    if not in_c:
        monkeypatch.setattr(plain_rows, "load", lambda: None)
        monkeypatch.setattr(pii_rows, "load", lambda: None)
    judged, in_pii_rows = [], []
    real_scan, real_judge = plain_rows.scan, pii_rows.judge
    monkeypatch.setattr(plain_rows, "scan", lambda *a: judged.append(a) or real_scan(*a))
    monkeypatch.setattr(pii_rows, "judge", lambda *a: in_pii_rows.append(real_judge(*a)) or in_pii_rows[-1])
    config = DataValidationConfig()
    config.pii.names.enabled = False
    config.pii.policy = policy
    config.dedup.near.enabled = near
    config.schema_.allow_extra_fields = policy == "strict"
    rows = _rows(3000, seed=7)
    expected, single = _one_at_a_time(config, rows)
    reasons = {o[0] for o in expected if isinstance(o, tuple)}
    assert {"duplicate", "json_error", "too_short", "too_long", "wrong_type", "blank_line"} <= reasons
    assert {"decode_error", "not_object", "missing_field", "secret" if policy == "strict" else "pii_density"} <= reasons
    assert ("unexpected_field" in reasons) == (policy != "strict")
    assert any(isinstance(o, bytes) and b"[EMAIL]" in o for o in expected)  # findings were redacted
    for size in (1, 7, 256, 5000):
        got, blocks = _in_blocks(config, rows, size)
        assert got == expected, size
        assert blocks.stats.to_json() == single.stats.to_json()
        assert (blocks.pii_found, blocks.pii_redacted, blocks.rows_with_pii) == (
            single.pii_found,
            single.pii_redacted,
            single.rows_with_pii,
        )
        blocks.close()
    single.close()
    assert bool(judged) == (in_c and not near)  # near-dup wants each row's text: Python's
    # Candidate rows judged in C (pii_rows.c) with findings, and some it left to Python.
    done = sum(int(j.done.sum()) for j in in_pii_rows)
    assert (done > 100 and any(j.rows_with_pii for j in in_pii_rows)) == in_c
    assert not in_c or any(not j.done.all() for j in in_pii_rows)


def test_a_line_of_a_later_file_may_open_with_a_bom():
    """A folder's files are one stream: the first line of each, not only of the first,
    may carry a BOM, in a block or alone."""
    config = DataValidationConfig()
    config.pii.names.enabled = False
    rows = [b'{"prompt": "a", "response": "b"}', b'\xef\xbb\xbf{"prompt": "c", "response": "d"}']
    v = Validator(config)
    v.lines.begin("one.jsonl", 1)
    v.lines.begin("two.jsonl", 2)
    assert all(isinstance(o, bytes) for o in v.check_lines(rows, 1, candidate_lines(rows), []))


def test_the_families_a_line_holds_find_what_all_families_find():
    """`find_pii(text, kinds)` with the kinds of the line `text` sits in gives exactly
    `find_pii(text)`, however the line was encoded."""
    samples = pii_corpus.labeled_samples(3000, seed=12) + pii_corpus.name_samples(300, seed=12)
    lines, texts = [], []
    for s in samples:
        for raw in (json.dumps({"prompt": s.text}).encode(), orjson.dumps({"prompt": s.text, "response": "ok"})):
            lines.append(raw)
            texts.append(s.text)
    found = 0
    blocked = candidate_lines(lines)
    for i, (raw, text) in enumerate(zip(lines, texts, strict=True)):
        kinds = line_kinds(raw)
        everything = pii.find_pii(text)
        found += bool(everything)
        if kinds == NONE:
            assert not everything, text
            assert i not in blocked
            continue
        assert pii.find_pii(text, kinds) == everything, (text, kinds)
        assert blocked[i] is None or kinds is not None and kinds <= blocked[i]
    assert found > 1000


@pytest.mark.parametrize("storage", ["runs", "sqlite"])
@pytest.mark.parametrize("arrays_from", [8, 1024], ids=["waiting-arrays", "waiting-dict"])
def test_fingerprint_batches_answer_as_one_key_at_a_time(arrays_from, storage, monkeypatch):
    """`add_many` over batches (and `add` between them), with repeats inside a batch and
    across batches, waiting keys in the dict and in arrays, written keys and Bloom false
    positives (a 2**10-bit filter), equals `add` key by key; so does the benchmark's
    SQLite baseline, which stores the written keys its own way."""
    from tests.benchmarks.sqlite_index import SqliteFingerprintIndex

    monkeypatch.setattr(FingerprintIndex, "_FLUSH", 64)
    monkeypatch.setattr(FingerprintIndex, "_BATCH", arrays_from)
    index = FingerprintIndex if storage == "runs" else SqliteFingerprintIndex
    monkeypatch.setattr(FingerprintIndex, "_BLOOM_BITS", 10)
    rng = random.Random(9)
    keys = [rng.getrandbits(64) for _ in range(600)]
    keys = [rng.choice(keys) if rng.random() < 0.4 else k for k in keys] * 2
    one, many = FingerprintIndex(), index()
    try:
        expected = [one.add(k, line) or 0 for line, k in enumerate(keys, 1)]
        got: list[int] = []
        start = 0
        while start < len(keys):
            size = rng.choice([1, 3, 50, 200])
            if size == 1 and rng.random() < 0.5:
                got.append(many.add(keys[start], start + 1) or 0)
                start += 1
                continue
            batch = np.array(keys[start : start + size], dtype=np.uint64)
            got += many.add_many(batch, np.arange(start + 1, start + 1 + len(batch))).tolist()
            start += size
        assert got == expected
        assert many.size == one.size
    finally:
        one.close()
        many.close()


def test_lengths_counted_together_equal_one_by_one():
    lengths = [0, 15, 16, 17, 300, 8192, 10**6]
    one, many = DataStats(), DataStats()
    for n in lengths:
        one.add(n, 0.0)
    many.add_lengths(lengths)
    assert many.to_json() == one.to_json()
    as_array = DataStats()  # as C's chars come: an array
    as_array.add_lengths(np.array(lengths, dtype=np.int64))
    assert as_array.to_json() == one.to_json()


@settings(max_examples=500, deadline=None)
@given(text=st.text(alphabet=st.sampled_from("aZ \t\n\x1f\xa0\u3000\u2028ﬁǅß中 ") | st.characters(), max_size=30))
def test_normalize_skips_the_collapse_only_where_it_changes_nothing(text):
    nfkc = text if text.isascii() else unicodedata.normalize("NFKC", text)
    assert normalize(text) == " ".join(nfkc.casefold().split())


@pytest.mark.parametrize("block_bytes", [1 << 22, 3000], ids=["rows-bound", "bytes-bound"])
def test_names_off_streams_write_what_one_line_at_a_time_writes(block_bytes, tmp_path, monkeypatch):
    """Names off, a block's clean rows are written as runs of C's output with the other
    lines' outcomes between them (`clean_pieces`): the clean and quarantine files, the
    statistics and the root equal one line at a time through `check`, blocks bounded by
    rows or by bytes (lines of 9000 bytes among them, each over the bound alone)."""
    corpus = tmp_path / "in.jsonl"
    corpus.write_bytes(b"\n".join(_rows(6000, seed=11)) + b"\n")
    config = DataValidationConfig()
    config.gate.max_reject_rate = 1.0
    config.pii.names.enabled = False

    def one_at_a_time(self, lines, first_line, candidates, lengths):
        out = []
        for i, raw in enumerate(lines):
            try:
                out.append(orjson.dumps(row_at_a_time.check(self, raw, first_line + i)) + b"\n")
            except Rejected as rej:
                out.append(rej.kept())
        return out, None

    runs = []
    real_pieces = streaming.clean_pieces
    monkeypatch.setattr(streaming, "clean_pieces", lambda *a: runs.append(real_pieces(*a)) or runs[-1])
    monkeypatch.setattr(streaming, "_BLOCK_BYTES", block_bytes)
    outputs = []
    for blocks in (True, False):
        if not blocks:
            monkeypatch.setattr(streaming, "_BLOCK_ROWS", 1)
            monkeypatch.setattr(Validator, "judge_lines", one_at_a_time)
        out = OutputPaths.in_dir(str(tmp_path / f"out-{blocks}"))
        result = engines.validate(str(corpus), out, config, show_progress=False)
        outputs.append([open(p, "rb").read() for p in (out.clean, out.quarantine, out.stats)])
        outputs[-1] += [result.metrics["rows_out"], result.metrics["merkle_root"]]
    assert outputs[0] == outputs[1]
    assert outputs[0][1].count(b"\n") > 500  # rejections among the runs
    pieces = [p for r in runs for p in r if type(p) is bytes]
    assert max(p.count(b"\n") for p in pieces) > 5  # runs of several lines in one slice


def test_blocks_are_bounded_in_rows_and_bytes(monkeypatch):
    """`fill_blocks` hands over every line once, in order, at the index it reports, in
    blocks of at most `_BLOCK_ROWS` lines and `_BLOCK_BYTES` bytes, a longer line alone."""
    monkeypatch.setattr(streaming, "_BLOCK_ROWS", 50)
    monkeypatch.setattr(streaming, "_BLOCK_BYTES", 1000)
    rng = random.Random(3)
    sizes = [rng.choice([1, 10, 30]) if rng.random() < 0.95 else rng.choice([400, 1500]) for _ in range(3000)]
    lines = [bytes([97 + i % 26]) * size for i, size in enumerate(sizes)]
    block, blocks = [], []
    start = 0
    while start < len(lines):
        piece = lines[start : start + rng.choice([1, 2, 5, 20, 300])]

        def full(k, piece=piece, start=start):
            assert k == 0 or block[-1] is piece[k - 1]  # 0: full before this piece added any
            blocks.append(list(block))
            block.clear()

        streaming.fill_blocks(block, piece, full)
        start += len(piece)
    blocks += [block] if block else []
    assert [line for b in blocks for line in b] == lines
    for b, after in zip(blocks[:-1], blocks[1:], strict=True):
        size = sum(map(len, b))
        assert len(b) <= 50 and (size <= 1000 or len(b) == 1)
        assert len(b) == 50 or size + len(after[0]) > 1000  # full: the next line did not fit
    assert any(len(b) == 50 for b in blocks) and any(len(b) < 50 for b in blocks[:-1])


@pytest.mark.parametrize("ner_batch,pending_rows", [(16, 8192), (4096, 37)], ids=["by-names", "by-rows"])
def test_names_on_blocks_settle_as_one_line_at_a_time(ner_batch, pending_rows, tmp_path, monkeypatch):
    """Names on, a block's rows are judged together (`check_lines`: a plain row no
    candidate matched, of a pattern or a name, is clean at once; the rest are scanned and
    proposed) and join the NER batch where one line at a time would (runs of clean rows
    wait as one entry, cut where the pending rows fill): the outputs and every batch of
    doubtful names the model sees equal `begin` line by line, which runs the name finder
    on every row."""
    from kfp_llmops.components.data_validation.names import NameFinder
    from tests.benchmarks.corpus import write_corpus

    corpus = tmp_path / "in.jsonl"
    write_corpus(str(corpus), 400_000, seed=4)
    config = DataValidationConfig()
    config.gate.max_reject_rate = 1.0
    config.pii.names.ner_batch_size = ner_batch  # 16: settles often, in the middle of blocks
    monkeypatch.setattr(streaming, "_PENDING_ROWS", pending_rows)  # 37: settles on the rows waiting

    def one_at_a_time(self, lines, first_line, candidates, lengths):
        out = []
        for i, raw in enumerate(lines):
            try:
                out.append(row_at_a_time.begin(self, raw, first_line + i))
            except Rejected as rej:
                out.append(rej)
        return out

    proposed, asked = [], []
    real_propose, real_settle = NameFinder.propose, NameFinder.settle
    monkeypatch.setattr(NameFinder, "propose", lambda self, texts: proposed.append(1) or real_propose(self, texts))

    def settle(self, proposals):
        batch = [(p.texts[i], c.start, c.end) for p in proposals for i, c in p.doubtful]
        if batch:
            asked[-1].append(batch)
        return real_settle(self, proposals)

    monkeypatch.setattr(NameFinder, "settle", settle)
    outputs, calls = [], []
    for blocks in (True, False):
        if not blocks:
            monkeypatch.setattr(streaming, "_BLOCK_ROWS", 1)
            monkeypatch.setattr(Validator, "judge_lines", lambda self, *a: (one_at_a_time(self, *a), None))
        proposed.clear()
        asked.append([])
        out = OutputPaths.in_dir(str(tmp_path / f"out-{blocks}"))
        result = engines.validate(str(corpus), out, config, show_progress=False)
        outputs.append([open(p, "rb").read() for p in (out.clean, out.quarantine, out.stats)])
        outputs[-1] += [result.metrics["pii_found"], result.metrics["merkle_root"]]
        calls.append(len(proposed))
    assert outputs[0] == outputs[1]
    assert outputs[0][3].get("PERSON") and outputs[0][3].get("EMAIL")  # names and patterns were found
    assert calls[0] < calls[1] / 3  # most rows skipped the name finder
    assert asked[0] == asked[1] and len(asked[0]) >= 3


def test_judged_rows_leave_no_reference_cycles():
    """Scanning a record (flat or nested strings, PII redacted, names merged) leaves no
    reference cycle: each would wait for the garbage collector, whose full collections
    walk every object alive (spaCy's model among them)."""
    import gc

    from kfp_llmops.components.data_validation.names import NameFinder

    config = DataValidationConfig()
    config.pii.max_density = 1.0
    finder = NameFinder(lambda items: [(s, e) for _, s, e in items])  # every doubtful name a person
    v = Validator(config, names=finder)
    rows = [
        {
            "prompt": "Mail a1@example.com or call +44 20 7946 0018 about the plan we made last week, Dear Will Smith.",
            "response": "Sure.",
        },
        {
            "messages": [
                {"role": "user", "content": "I am Rose Miller, 42 Baker Street"},
                {"role": "assistant", "content": "Hi."},
            ]
        },
        {"prompt": "my card 4111 1111 1111 1111 and the weather", "response": "Thanks May Jones."},
    ]
    lines = [orjson.dumps(r) for r in rows]
    row_at_a_time.check(
        v,
        b'{"prompt": "Warm up the caches first, Dear Bill Jones, and write to b@example.org today", "response": "ok"}',
        1,
    )  # warm-up: caches and lazy imports are not cycles of a row
    gc.collect()
    gc.disable()
    try:
        redacted = [row_at_a_time.check(v, raw, n) for n, raw in enumerate(lines, 2)]
        left = gc.collect()
    finally:
        gc.enable()
        v.close()
    assert "[EMAIL]" in redacted[0]["prompt"] and "[PERSON]" in redacted[1]["messages"][0]["content"]
    assert left == 0


def test_rejected_rows_leave_no_reference_cycles():
    """A block's rejected rows keep their verdicts, not the tracebacks whose frames would
    hold the whole block in a cycle until the garbage collector ran."""
    import gc

    config = DataValidationConfig()
    config.pii.names.enabled = False
    v = Validator(config)
    block = [
        b'{"prompt": "what is up?", "response": "Fine."}',
        b'{"prompt": "cut off',
        b'{"prompt": "x", "response": "   "}',
        b'{"prompt": "what is up?", "response": "Fine."}',
        b"[1, 2]",
    ]
    warm = [b'{"prompt": "a warm-up row", "response": "Fine."}']
    v.check_lines(warm, 100, candidate_lines(warm), [])
    gc.collect()
    gc.disable()
    try:
        out = v.check_lines(block, 1, candidate_lines(block), [])
        reasons = [o.reason for o in out if isinstance(o, Rejected)]
        del out
        left = gc.collect()
    finally:
        gc.enable()
        v.close()
    assert reasons == ["json_error", "too_short", "duplicate", "not_object"]
    assert left == 0


def test_a_stream_unfreezes_what_it_froze(tmp_path, monkeypatch):
    """The objects alive before the rows are read are frozen while they are, and thawed
    after, whether the run ends or fails: nothing stays out of the collector's sight."""
    import gc

    corpus = tmp_path / "in.jsonl"
    corpus.write_bytes(b'{"prompt": "what is up?", "response": "Fine."}\n' * 3)
    config = DataValidationConfig()
    config.pii.names.enabled = False
    seen = []
    real = Validator.judge_lines

    def judge_lines(self, *args):
        seen.append(gc.get_freeze_count())
        if len(seen) == 2:
            raise RuntimeError("a stream that fails")
        return real(self, *args)

    monkeypatch.setattr(Validator, "judge_lines", judge_lines)
    engines.validate(str(corpus), OutputPaths.in_dir(str(tmp_path / "a")), config, show_progress=False)
    assert gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError):
        engines.validate(str(corpus), OutputPaths.in_dir(str(tmp_path / "b")), config, show_progress=False)
    assert gc.get_freeze_count() == 0
    assert len(seen) == 2 and all(n > 0 for n in seen)
