"""KGW watermark: green lists, the z-test's calibration, detection of watermarked text."""

import math
import random

import numpy as np
import pytest
import torch

from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.watermark.keys import load_key, parse_key
from kfp_llmops.components.common.watermark.kgw import Watermark, normal_sf

V = 1000


def reference_greenlist(key, prev, vocab, gamma):
    """lm-watermarking's simple_1 construction, written out."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(key * prev)
    return set(torch.randperm(vocab, generator=gen)[: int(vocab * gamma)].tolist())


@pytest.mark.parametrize("key", [15485863, 1, 987654321])
def test_lefthash_green_lists_equal_the_reference_construction(key):
    wm = Watermark(key, V, "lefthash", gamma=0.25)
    rng = random.Random(key)
    for prev in rng.sample(range(1, V), 60):
        expected = reference_greenlist(key, prev, V, 0.25)
        assert set(np.flatnonzero(wm.lefthash.mask(prev)).tolist()) == expected
        tokens = np.array(rng.sample(range(V), 50))
        flags = wm.lefthash.is_green(np.full(50, prev), tokens)
        assert flags.tolist() == [t in expected for t in tokens]


def test_exact_p_value():
    assert normal_sf(4.0) == pytest.approx(3.167124183e-05, rel=1e-9)
    assert normal_sf(0.0) == 0.5


@pytest.mark.parametrize("scheme", ["lefthash", "selfhash"])
def test_unwatermarked_z_scores_are_standard_normal(scheme):
    wm = Watermark(12345, V, scheme, gamma=0.25, min_tokens=1, ignore_repeated=False)
    rng = np.random.default_rng(0)
    zs = np.array([wm.detect(rng.integers(0, V, 200)).z for _ in range(400)])
    assert abs(zs.mean()) < 0.15 and 0.8 < zs.var() < 1.25
    assert (zs >= 4).mean() == 0.0


def _generate(wm, steps, rng, entropy_scale=1.0):
    """Sample from random logits with the watermark's bias: a high-entropy toy LM."""
    ids = torch.tensor([[int(rng.integers(0, V)) for _ in range(wm.width)]])
    for _ in range(steps):
        logits = torch.from_numpy(rng.normal(0, entropy_scale, (1, V)).astype(np.float32))
        logits = wm.bias(ids, logits)
        probs = torch.softmax(logits, -1)
        nxt = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(int(rng.integers(0, 2**31))))
        ids = torch.cat([ids, nxt], dim=1)
    return ids[0].numpy()


@pytest.mark.parametrize("scheme", ["lefthash", "selfhash"])
def test_watermarked_generations_are_detected_and_other_keys_are_not(scheme):
    wm = Watermark(777, V, scheme, gamma=0.25, delta=2.0)
    rng = np.random.default_rng(1)
    texts = [_generate(wm, 200, rng) for _ in range(10)]
    detections = [wm.detect(t) for t in texts]
    assert all(d.watermarked and d.z > 4 for d in detections)
    other = Watermark(778, V, scheme, gamma=0.25)
    assert all(not other.detect(t).watermarked for t in texts)


def test_repeated_ngrams_count_once():
    wm = Watermark(5, V, "lefthash", min_tokens=1)
    tokens = np.array([1, 2] * 50)
    assert wm.detect(tokens).tokens_scored == 2
    assert Watermark(5, V, "lefthash", min_tokens=1, ignore_repeated=False).detect(tokens).tokens_scored == 99


def test_short_texts_are_not_scored():
    d = Watermark(5, V, "lefthash", min_tokens=16).detect(np.arange(10))
    assert math.isnan(d.z) and not d.watermarked and d.tokens_scored == 9


def test_keys_come_from_file_or_env_never_config(tmp_path, monkeypatch):
    path = tmp_path / "key"
    path.write_text("0x1f\n")
    assert load_key(str(path)) == 31
    monkeypatch.setenv("LLMOPS_WATERMARK_KEY", "42")
    assert load_key() == 42
    monkeypatch.delenv("LLMOPS_WATERMARK_KEY")
    with pytest.raises(InputError, match="no watermark key"):
        load_key()
    with pytest.raises(InputError, match="decimal or 0x-hex"):
        parse_key("secret", "x")


def test_detect_cli_prints_json_per_text(tmp_path, capsys):
    import json as _json

    from transformers import AutoTokenizer

    from kfp_llmops.components.training.base_model import build_tokenizer
    from kfp_llmops.pipelines.cli.main import main

    tok_dir = tmp_path / "tok"
    tok = build_tokenizer([f"sentence number {i} about cats and dogs" for i in range(200)], 300)
    tok.save_pretrained(tok_dir)
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    wm = Watermark(99, len(tokenizer), "lefthash")
    rng = np.random.default_rng(3)
    marked = tokenizer.decode(_generate_v(wm, 120, rng, len(tokenizer)).tolist())
    plain = " ".join(f"word{i}" for i in range(80))
    texts = tmp_path / "texts.jsonl"
    texts.write_text(
        _json.dumps({"id": "a", "response": marked}) + "\n" + _json.dumps({"id": "b", "text": plain}) + "\n"
    )
    key = tmp_path / "key"
    key.write_text("99")
    capsys.readouterr()
    assert main(["watermark", "detect", "--key-file", str(key), "--tokenizer", str(tok_dir), str(texts)]) == 0
    rows = [_json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["id"] for r in rows] == ["a", "b"]
    assert set(rows[0]) >= {"z", "p_value", "tokens_scored", "green_fraction", "watermarked"}
    assert rows[0]["z"] > rows[1]["z"]


def _generate_v(wm, steps, rng, vocab):
    ids = torch.tensor([[int(rng.integers(0, vocab))]])
    for _ in range(steps):
        logits = wm.bias(ids, torch.from_numpy(rng.normal(0, 1, (1, vocab)).astype(np.float32)))
        nxt = torch.multinomial(
            torch.softmax(logits, -1), 1, generator=torch.Generator().manual_seed(int(rng.integers(0, 2**31)))
        )
        ids = torch.cat([ids, nxt], dim=1)
    return ids[0]


@pytest.mark.parametrize("scheme", ["lefthash", "selfhash"])
def test_detect_many_equals_one_by_one(scheme):
    wm = Watermark(31, V, scheme, min_tokens=4)
    rng = np.random.default_rng(7)
    texts = [rng.integers(0, V, n) for n in (0, 1, 3, 10, 50, 200)] + [np.array([5, 6] * 30)]
    together = wm.detect_many(texts)
    for text, d in zip(texts, together, strict=False):
        single = wm.detect(text)
        assert (single.tokens_scored, single.green) == (d.tokens_scored, d.green)


@pytest.mark.parametrize("vocab", [1000, 5000])  # dense table; rows unpacked per step
def test_processor_adds_delta_exactly_on_the_green_list(vocab):
    wm = Watermark(11, vocab, "lefthash", delta=2.0)
    ids = torch.tensor([[3, 17], [4, 99], [5, 17]])
    scores = torch.zeros(3, vocab + 8)  # logits may be wider than the vocabulary
    out = wm.bias(ids, scores.clone())
    for row, prev in enumerate([17, 99, 17]):
        expected = torch.from_numpy(wm.lefthash.mask(prev).astype(np.float32) * 2.0)
        assert torch.equal(out[row, :vocab], expected) and torch.equal(out[row, vocab:], torch.zeros(8))


def test_green_list_table_stays_within_its_bound_and_results_do_not_change():
    from kfp_llmops.components.common.watermark.kgw import LeftHashGreenLists

    rng = np.random.default_rng(3)
    vocab = 5000
    free = Watermark(77, vocab, "lefthash")
    bounded = Watermark(77, vocab, "lefthash")
    bounded.lefthash = LeftHashGreenLists(77, vocab, 0.25, max_bytes=40 * ((vocab + 7) // 8))  # 40 rows
    texts = [rng.integers(0, vocab, 30) for _ in range(20)]
    for text in texts:  # each call fits; together they pass the bound many times
        assert bounded.detect(text).z == free.detect(text).z
        assert len(bounded.lefthash._bits) <= 40
    ids = torch.from_numpy(rng.integers(0, vocab, (4, 3)))
    assert torch.equal(bounded.bias(ids, torch.zeros(4, vocab)), free.bias(ids, torch.zeros(4, vocab)))
