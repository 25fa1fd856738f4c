"""verify_watermark end to end on a small real model (generation with the processor)."""

import json

import pytest

from helpers import tiny_model
from kfp_llmops.components.common.contract import raise_unless_passed
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.watermark import run_to_dir, stage_result

pytestmark = pytest.mark.timeout(600)
FAST = "delta: {delta}\ngeneration: {{max_new_tokens: 80, min_new_tokens: 80, batch_size: 20}}\n"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("wm")
    rows, _, model, _ = tiny_model(root)
    eval_path = root / "eval.jsonl"
    eval_path.write_text("".join(json.dumps({"id": f"e{i}", **r}) + "\n" for i, r in enumerate(rows)))
    key = root / "key"
    key.write_text("987654321")
    return {"root": root, "model": model, "eval": str(eval_path), "key": str(key)}


def test_watermark_is_verified_with_calibrated_fpr(setup, tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(FAST.format(delta=4.0))
    result = run_to_dir(setup["model"], setup["eval"], str(tmp_path / "out"), str(cfg), setup["key"])
    m = result["metrics"]
    assert result["verified"], result["checks"]
    assert m["tpr"] >= 0.95 and m["fpr"] <= 0.01 and m["positives_scored"] == 40 and m["negatives_scored"] >= 40
    assert m["mean_z_watermarked"] > 4 > abs(m["mean_z_unwatermarked"])
    assert m["tpr_substitution_10"] >= m["tpr_substitution_30"] and m["tpr_deletion_10"] >= m["tpr_deletion_30"]
    html = (tmp_path / "out" / "report.html").read_text()
    assert "background:#b7f5b7" in html and "data:image/svg+xml;base64," in html
    rows = [json.loads(line) for line in open(tmp_path / "out" / "watermarked.jsonl")]
    assert len(rows) == 40 and all(r["watermarked"] for r in rows[:5])


def test_detection_can_be_measured_on_open_ended_prompts(setup, tmp_path):
    """`generation.prompts`: the long texts continue these (cycled to `texts`), while the
    quality cost still answers the eval set."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        FAST.format(delta=4.0).replace(
            "batch_size: 20", "batch_size: 20, texts: 24, prompts: [Tell me a story., Write something.]"
        )
    )
    result = run_to_dir(setup["model"], setup["eval"], str(tmp_path / "out"), str(cfg), setup["key"])
    rows = [json.loads(line) for line in open(tmp_path / "out" / "watermarked.jsonl")]
    assert [r["prompt"] for r in rows] == ["Tell me a story.", "Write something."] * 12
    assert len({r["response"] for r in rows}) == 24  # sampled: each text its own
    assert result["metrics"]["positives_scored"] == 24 and result["metrics"]["tpr"] >= 0.9
    assert result["metrics"]["exact_match_unwatermarked"] >= 0  # the eval set still answered
    assert (
        "Detection: 24 texts of 80–80 new tokens continuing 2 open-ended prompts (Tell me a story.; Write something.)"
    ) in (tmp_path / "out" / "report.html").read_text()


def test_without_bias_nothing_is_detected_and_the_gate_fails(setup, tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(FAST.format(delta=0.0))
    result = run_to_dir(setup["model"], setup["eval"], str(tmp_path / "out"), str(cfg), setup["key"])
    assert result["metrics"]["tpr"] <= 0.05 and not result["verified"]
    with pytest.raises(Exception, match="watermark not verified: tpr"):
        raise_unless_passed(stage_result(result))


def test_missing_key_is_a_one_line_error(setup, tmp_path, monkeypatch):
    monkeypatch.delenv("LLMOPS_WATERMARK_KEY", raising=False)
    with pytest.raises(InputError, match="no watermark key"):
        run_to_dir(setup["model"], setup["eval"], str(tmp_path / "out"))


def test_cli_verify_exit_codes(setup, tmp_path):
    from kfp_llmops.pipelines.cli.main import main

    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(FAST.format(delta=4.0))
    bad.write_text(FAST.format(delta=0.0))
    base = ["watermark", "verify", "--model", setup["model"], "--data", setup["eval"], "--key-file", setup["key"]]
    assert main(base + ["--out", str(tmp_path / "a"), "--config", str(good)]) == 0
    assert main(base + ["--out", str(tmp_path / "b"), "--config", str(bad)]) == 1
    assert main(base[:-2] + ["--key-file", str(tmp_path / "nokey"), "--out", str(tmp_path / "c")]) == 2


def test_weight_watermark_checks_join_the_gate(setup, tmp_path):
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from kfp_llmops.components.common import integrity
    from kfp_llmops.components.common.watermark.weights import WeightWatermarkConfig, regularizer

    model = tmp_path / "model"
    shutil.copytree(setup["model"], model)
    (model / "manifest.json").unlink()
    wcfg = WeightWatermarkConfig(enabled=True, bits=32)
    state = load_file(model / "model.safetensors")
    target = torch.nn.Parameter(state[wcfg.target].clone())
    opt = torch.optim.Adam([target], lr=1e-3)
    for _ in range(150):  # embed the bits directly
        loss = regularizer(target, 987654321, wcfg.bits)
        opt.zero_grad()
        loss.backward()
        opt.step()
    state[wcfg.target] = target.detach()
    save_file(state, model / "model.safetensors", metadata={"format": "pt"})
    integrity.seal("model", str(model))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(FAST.format(delta=4.0) + "weights: {enabled: true, bits: 32}\n")
    result = run_to_dir(str(model), setup["eval"], str(tmp_path / "out"), str(cfg), setup["key"])
    by_metric = {c["metric"]: c["verdict"] for c in result["checks"]}
    assert by_metric["bit_accuracy"] == "pass" and by_metric["bit_p_value"] == "pass"
    assert result["metrics"]["bit_accuracy"] >= 0.925
    unmarked = run_to_dir(setup["model"], setup["eval"], str(tmp_path / "out2"), str(cfg), setup["key"])
    assert {c["metric"]: c["verdict"] for c in unmarked["checks"]}["bit_p_value"] == "fail"
    assert not unmarked["verified"]


def test_quality_cost_is_measured_and_can_be_gated(setup, tmp_path):
    """Greedy answers with and without the mark, scored as evaluation scores them (exact
    match and BERTScore F1 against the references, perplexity under the model): at delta 0
    nothing changes, and the curve shows detection and cost rising with delta; cost
    bounds turn the measurements into checks."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        FAST.format(delta=4.0) + "quality: {deltas: [0.0, 4.0]}\ngate: {max_exact_match_cost: 0.0, "
        "max_perplexity_increase: 0.10, max_bertscore_cost: 0.02, min_judge_win_rate: 0.45}\n"
    )
    result = run_to_dir(setup["model"], setup["eval"], str(tmp_path / "out"), str(cfg), setup["key"])
    m = result["metrics"]
    assert 0 <= m["exact_match_watermarked"] <= 1 and m["exact_match_cost"] == pytest.approx(
        m["exact_match_unwatermarked"] - m["exact_match_watermarked"]
    )
    assert m["perplexity_increase"] == pytest.approx(m["perplexity_watermarked"] / m["perplexity_unwatermarked"] - 1)
    assert m["bertscore_cost"] == pytest.approx(m["bertscore_f1_unwatermarked"] - m["bertscore_f1_watermarked"])
    # Greedy answers are the model's likeliest; the mark pushes them off it.
    assert m["perplexity_unwatermarked"] < m["perplexity_watermarked"]
    zero, four = result["tradeoff"]
    assert zero["delta"] == 0.0 and zero["tpr"] <= 0.05
    assert zero["exact_match_cost"] == zero["bertscore_cost"] == zero["perplexity_increase"] == 0.0
    assert zero["judge_win_rate"] == 0.5  # the same answers: all ties
    assert four["tpr"] >= 0.95
    for name in ("exact_match_cost", "perplexity_increase", "bertscore_cost", "judge_win_rate"):
        assert four[name] == pytest.approx(m[name])
    assert m["judge_wins"] + m["judge_ties"] + m["judge_losses"] == 40
    assert m["judge_win_rate_lower"] <= m["judge_win_rate"] <= m["judge_win_rate_upper"]
    verdicts = {c["metric"]: c["verdict"] for c in result["checks"]}
    assert verdicts["exact_match_cost"] == ("pass" if m["exact_match_cost"] <= 0 else "fail")
    assert verdicts["perplexity_increase"] == ("pass" if m["perplexity_increase"] <= 0.10 else "fail")
    assert verdicts["bertscore_cost"] == ("pass" if m["bertscore_cost"] <= 0.02 else "fail")
    assert verdicts["judge_win_rate"] == ("pass" if m["judge_win_rate"] >= 0.45 else "fail")
    html = (tmp_path / "out" / "report.html").read_text()
    assert "Detection against quality, by delta" in html and "Quality cost:" in html and "BERTScore F1" in html


def test_an_oracle_scores_the_perplexity_once_its_root_verifies(setup, tmp_path):
    from kfp_llmops.components.common import integrity

    root = integrity.verify("model", setup["model"])
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(FAST.format(delta=4.0) + f"quality: {{oracle_model: {setup['model']}, oracle_root: '{'0' * 64}'}}\n")
    with pytest.raises(InputError, match="model does not verify: .* is not the expected 0000"):
        run_to_dir(setup["model"], setup["eval"], str(tmp_path / "bad"), str(cfg), setup["key"])
    cfg.write_text(FAST.format(delta=4.0) + f"quality: {{oracle_model: {setup['model']}}}\n")
    with pytest.raises(InputError, match="quality.oracle_root: required"):
        run_to_dir(setup["model"], setup["eval"], str(tmp_path / "bad2"), str(cfg), setup["key"])
    cfg.write_text(FAST.format(delta=4.0) + f"quality: {{oracle_model: {setup['model']}, oracle_root: '{root}'}}\n")
    same = run_to_dir(setup["model"], setup["eval"], str(tmp_path / "oracle"), str(cfg), setup["key"])
    # The oracle here is the model itself: the figures equal the default's.
    cfg.write_text(FAST.format(delta=4.0))
    plain = run_to_dir(setup["model"], setup["eval"], str(tmp_path / "self"), str(cfg), setup["key"])
    assert same["metrics"]["perplexity_watermarked"] == pytest.approx(plain["metrics"]["perplexity_watermarked"])
