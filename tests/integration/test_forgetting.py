"""Forgetting: the candidate and the model its training started from read the same
held-out prose; the gate bounds how much the candidate's perplexity rose, and a base
built from random weights is skipped, saying why."""

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from byo_models import save_model
from helpers import tiny_model
from kfp_llmops.components.common import generation, integrity
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.prose import SHORT_WORDS, held_out_passages
from kfp_llmops.components.evaluation.config import ForgettingConfig, GateConfig
from kfp_llmops.components.evaluation.forgetting import checks, find_base, measure


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    folder = save_model(str(tmp_path_factory.mktemp("forget") / "base"), "llama", vocab=2000, shard="1GB")
    return folder, integrity.seal("model", folder)


def _sharpened(base_dir: str, out: str, scale: float) -> tuple[str, str]:
    """The base with its output layer scaled: the same model, more sure of itself."""
    shutil.copytree(base_dir, out, ignore=shutil.ignore_patterns("manifest.json"))
    path = os.path.join(out, "model.safetensors")
    weights = load_file(path)
    weights["lm_head.weight"] = weights["lm_head.weight"] * scale
    save_file(weights, path, metadata={"format": "pt"})
    return out, integrity.seal("model", out)


def test_the_held_out_passages_are_prose_no_demo_row_trains_on(tmp_path):
    from kfp_llmops.pipelines.demo.demo_data import make_demo_dataset

    passages = held_out_passages()
    assert len(passages) == 32 and all(80 <= len(p.split()) <= 200 for p in passages)
    rows = []
    for line in open(make_demo_dataset(str(tmp_path), rows=400)["train"], "rb"):
        try:
            rows.append(json.loads(line))
        except ValueError:  # the demo's deliberately malformed lines
            continue
    prose = {r["response"] for r in rows if isinstance(r, dict) and len(str(r.get("response", "")).split()) > 8}
    assert prose and all(len(a.split()) <= SHORT_WORDS for a in prose)
    assert not any(a in p for a in prose for p in passages)


def test_a_model_that_reads_prose_worse_than_its_base_is_refused(base, tmp_path):
    folder, root = base
    cfg = ForgettingConfig(passages=8)
    found = find_base(cfg, folder, root)
    model, tok = generation.load_model(folder)
    same = measure(model, tok, found, cfg, root)
    assert same["forgetting"] == 0.0 and checks(same, GateConfig().max_forgetting, found)[0].verdict == "pass"
    worse_dir, worse_root = _sharpened(folder, str(tmp_path / "worse"), 8.0)
    worse_model, _ = generation.load_model(worse_dir)
    worse = measure(worse_model, tok, found, cfg, worse_root)
    assert worse["general_perplexity"] > 1.1 * worse["general_perplexity_base"]
    (check,) = checks(worse, GateConfig().max_forgetting, found)
    assert check.verdict == "fail" and check.metric == "forgetting" and "against the base model's" in check.reason
    with torch.no_grad():  # the same passages, the same numbers
        assert measure(worse_model, tok, found, cfg, worse_root) == worse


def test_no_base_or_one_built_from_random_weights_is_skipped_saying_why(tmp_path, base):
    cfg = ForgettingConfig()
    nothing = find_base(cfg, None, None)
    assert (
        checks(None, GateConfig().max_forgetting, nothing)[0].verdict == "skipped"
        and "no base model" in nothing.why_not
    )
    _, _, demo, demo_root = tiny_model(tmp_path)
    scratch = find_base(cfg, demo, demo_root)
    (check,) = checks(None, GateConfig().max_forgetting, scratch)
    assert check.verdict == "skipped" and "random weights" in check.reason and scratch.root == demo_root
    with pytest.raises(InputError, match="does not verify|not the expected|root"):
        find_base(cfg, base[0], "0" * 64)  # a base that is not the one training recorded
