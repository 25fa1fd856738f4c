"""The win rate against production with real judges: BERTScore on MiniLM, and one-logit
classifiers built from MiniLM, sealed and pinned like any judge a user brings."""

import json
import os

import pytest

from kfp_llmops.components.common import baseline, integrity, judging
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.judging import JudgeConfig
from kfp_llmops.components.common.similarity import BertScoreConfig
from kfp_llmops.components.evaluation import run_to_dir, winrate
from kfp_llmops.components.evaluation.config import GateConfig, WinRateConfig
from kfp_llmops.components.training.base_model import build_base_model

pytestmark = pytest.mark.timeout(600)

PROMPTS = [f"What is the capital of {c}?" for c in ("France", "Spain", "Italy", "Peru", "Chile", "Cuba")]
REFERENCES = [
    f"The capital of {c} is {t}."
    for c, t in (
        ("France", "Paris"),
        ("Spain", "Madrid"),
        ("Italy", "Rome"),
        ("Peru", "Lima"),
        ("Chile", "Santiago"),
        ("Cuba", "Havana"),
    )
]
# The candidate is right on the first four, both answer the fifth alike, production is right on the last.
CANDIDATE = REFERENCES[:5] + ["The the the the the."]
PRODUCTION = ["The18The18The18 of 51."] * 4 + [REFERENCES[4], REFERENCES[5]]


def test_the_better_answers_win_ties_count_half_and_the_gate_reads_the_interval():
    judged = judging.judge(PROMPTS, CANDIDATE, PRODUCTION, REFERENCES, JudgeConfig(), BertScoreConfig())
    assert [j.outcome for j in judged] == [1, 1, 1, 1, 0, -1]
    cfg = WinRateConfig()
    won = judging.win_rate(judged, cfg.confidence, cfg.bootstrap)
    assert (won["wins"], won["ties"], won["losses"]) == (4, 1, 1)
    assert won["win_rate"] == pytest.approx(4.5 / 6)
    assert won["win_rate_lower"] < won["win_rate"] < won["win_rate_upper"] <= 1.0
    assert judging.win_rate(judged, cfg.confidence, cfg.bootstrap) == won  # fixed seed: same interval
    assert all(c.verdict == "pass" for c in winrate.checks(won, GateConfig(), ""))
    # The same pairs the other way round: production is better, and the gate refuses.
    lost = judging.win_rate(
        judging.judge(PROMPTS, PRODUCTION, CANDIDATE, REFERENCES, JudgeConfig(), BertScoreConfig()),
        cfg.confidence,
        cfg.bootstrap,
    )
    assert (lost["wins"], lost["losses"]) == (1, 4) and lost["win_rate"] == pytest.approx(1.5 / 6)
    assert {c.metric: c.verdict for c in winrate.checks(lost, GateConfig(), "")} == {
        "win_rate": "fail",
        "win_rate_lower": "fail",
    }
    skipped = winrate.checks(None, GateConfig(), "no model in production to compare with")
    assert {c.verdict for c in skipped} == {"skipped"} and skipped[0].reason.startswith("no model")


def _judge(tmp_path, name: str, bias: float, labels: int = 1) -> tuple[str, str]:
    """MiniLM with a sequence-classification head whose output is `bias` for any input."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from kfp_llmops.components.common.similarity import resolve_model

    source = resolve_model("minilm")
    model = AutoModelForSequenceClassification.from_pretrained(source, num_labels=labels)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.fill_(bias)
    folder = str(tmp_path / name)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return folder, integrity.seal("model", folder)


def test_a_pairwise_judge_that_favours_the_first_answer_is_cancelled_by_the_swap(tmp_path):
    folder, root = _judge(tmp_path, "first-slot", bias=3.0)
    cfg = JudgeConfig(kind="pairwise", path=folder, root=root)
    judged = judging.judge(PROMPTS, CANDIDATE, PRODUCTION, REFERENCES, cfg, BertScoreConfig())
    # Asked once, it prefers whichever answer it reads first; asked both ways, every pair is a tie.
    differ = [j for j in judged if j.consistent is not None]
    assert len(differ) == 5 and all(j.outcome == 0 and not j.consistent for j in differ)
    assert judging.win_rate(judged)["judge_position_consistency"] == 0.0
    # A reward model scores each answer alone: equal scores are ties too.
    reward = judging.judge(
        PROMPTS,
        CANDIDATE,
        PRODUCTION,
        REFERENCES,
        JudgeConfig(kind="reward", path=folder, root=root),
        BertScoreConfig(),
    )
    assert [j.outcome for j in reward] == [0] * 6


def test_a_judge_is_pinned_and_must_have_one_output(tmp_path):
    folder, root = _judge(tmp_path, "judge", bias=0.0)
    with pytest.raises(ValueError, match="needs path and root"):
        JudgeConfig(kind="reward", path=folder)
    with pytest.raises(InputError, match="is not the expected"):
        judging.JudgeModel(JudgeConfig(kind="reward", path=folder, root="0" * 64))
    two, two_root = _judge(tmp_path, "two", bias=0.0, labels=2)
    with pytest.raises(InputError, match="num_labels 1"):
        judging.JudgeModel(JudgeConfig(kind="reward", path=two, root=two_root))


def test_the_production_model_is_the_first_place_that_verifies(tmp_path):
    rows = [
        {"prompt": f"What is {a} plus {b}?", "response": f"{a} plus {b} is {a + b}."}
        for a in range(1, 9)
        for b in range(1, 9)
    ]
    clean = tmp_path / "clean.jsonl"
    clean.write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = str(tmp_path / "model")
    build_base_model(str(clean), model, size="tiny")
    root = integrity.verify("model", model)
    folder, missed = baseline.model_folder([str(tmp_path / "gone"), model], root, str(tmp_path / "work"))
    assert folder == model and len(missed) == 1 and "gone" in missed[0]
    assert baseline.model_folder([str(tmp_path / "gone")], root, str(tmp_path / "work"))[0] is None
    # A copy that does not verify is passed over for one that does; when none does, it is an error.
    other = str(tmp_path / "other")
    build_base_model(str(clean), other, size="tiny", seed=1)
    assert baseline.model_folder([other, model], root, str(tmp_path / "work"))[0] == model
    with pytest.raises(InputError, match="is not the expected"):
        baseline.model_folder([other, str(tmp_path / "gone")], root, str(tmp_path / "work"))

    # Promotion keeps the model on the release volume (hard links), the one before it too.
    releases = tmp_path / "volume" / "run-1"
    kept = baseline.keep_model(str(releases), model, root)
    assert kept == str(tmp_path / "volume" / "production" / root)
    assert (
        os.stat(os.path.join(kept, "model.safetensors")).st_ino
        == os.stat(os.path.join(model, "model.safetensors")).st_ino
    )
    other_root = integrity.verify("model", other)
    baseline.keep_model(str(releases), other, other_root)
    third = str(tmp_path / "third")
    build_base_model(str(clean), third, size="tiny", seed=2)
    baseline.keep_model(str(releases), third, integrity.verify("model", third))
    assert sorted(os.listdir(tmp_path / "volume" / "production")) == sorted(
        [other_root, integrity.verify("model", third)]
    )

    # Against another model: it answers the same prompts, each pair is judged, the report lists them.
    eval_path = tmp_path / "eval.jsonl"
    eval_path.write_text("".join(json.dumps({"id": f"e{i}", **r}) + "\n" for i, r in enumerate(rows[:10])))
    fast = "generation: {max_new_tokens: 8}\n"
    result = run_to_dir(
        model,
        str(eval_path),
        str(tmp_path / "vs"),
        fast,
        show_progress=False,
        production_model=other,
        production_root=other_root,
    )
    win = result["win_rate"]
    assert win["wins"] + win["ties"] + win["losses"] == 10 and not win["same_model"]
    differ = [s for s in result["samples"] if s["production_response"] != s["response"]]
    assert differ and all(s["judged"] != 0 or abs(s["judge_margin"]) <= 0.01 for s in differ)
    assert result["metrics"]["win_rate"] == win["win_rate"]
    assert "## Where the candidate and production differ" in open(tmp_path / "vs" / "report.md").read()
    # Against itself: not generated twice, a tie each, and the report says why.
    result = run_to_dir(
        model,
        str(eval_path),
        str(tmp_path / "out"),
        fast,
        show_progress=False,
        production_model=model,
        production_root=root,
    )
    win = result["win_rate"]
    assert (win["wins"], win["ties"], win["losses"], win["win_rate"]) == (0, 10, 0, 0.5) and win["same_model"]
    report = open(tmp_path / "out" / "report.md").read()
    assert "0 wins, 10 ties, 0 losses; win rate 0.500" in report and "the same Merkle root" in report
    with pytest.raises(InputError, match="is not the expected"):
        run_to_dir(
            model,
            str(eval_path),
            str(tmp_path / "bad"),
            show_progress=False,
            production_model=model,
            production_root="e" * 64,
        )
    assert not os.path.exists(tmp_path / "bad" / "blessing.json")
