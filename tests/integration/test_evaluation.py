"""evaluate_llm with the real libraries: bert-score on MiniLM, Detoxify on a checkpoint
built from MiniLM, alt-profanity-check, and the stage end to end."""

import json
import os
import pickle
import shutil

import pytest

from kfp_llmops.components.common.contract import raise_unless_passed
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.integrity import sha256_file
from kfp_llmops.components.common.similarity import BertScoreConfig, bertscore
from kfp_llmops.components.evaluation import run_to_dir, stage_result
from kfp_llmops.components.evaluation.config import ToxicityConfig
from kfp_llmops.components.evaluation.toxicity import ModelDetector, lexical_scores
from kfp_llmops.components.training.base_model import build_base_model

pytestmark = pytest.mark.timeout(600)


def test_bertscore_paraphrase_far_above_unrelated():
    pair = (
        ["The cat sat on the mat.", "The cat sat on the mat."],
        ["A cat was sitting on the mat.", "Quarterly revenue grew by twelve percent."],
    )
    paraphrase, unrelated = bertscore(*pair, BertScoreConfig(rescale=False))["f1"]
    assert paraphrase > 0.8 and unrelated < 0.5 and paraphrase - unrelated > 0.4
    # Rescaled (the default, against the pinned baseline): unrelated text reads 0 or below.
    paraphrase, unrelated = bertscore(*pair, BertScoreConfig())["f1"]
    assert paraphrase > 0.6 and unrelated < 0.05 and paraphrase - unrelated > 0.8


def test_bertscore_rescale_without_baseline_fails_loudly(tmp_path):
    with pytest.raises(InputError, match="baseline_path is not set for model"):
        bertscore(["a"], ["b"], BertScoreConfig(model=str(tmp_path)))
    with pytest.raises(InputError, match="no such file"):
        bertscore(["a"], ["b"], BertScoreConfig(baseline_path=str(tmp_path / "none.csv")))


def test_bertscore_rescale_with_a_baseline_file(tmp_path):
    baseline = tmp_path / "minilm.tsv"
    baseline.write_text("LAYER,P,R,F\n" + "".join(f"{i},0.3,0.3,0.3\n" for i in range(7)))
    raw = bertscore(["The cat sat."], ["A cat sat."], BertScoreConfig(rescale=False))["f1"][0]
    rescaled = bertscore(["The cat sat."], ["A cat sat."], BertScoreConfig(rescale=True, baseline_path=str(baseline)))
    assert rescaled["f1"][0] == pytest.approx((raw - 0.3) / 0.7, abs=1e-4)


@pytest.fixture(scope="module")
def detector():
    return ModelDetector(ToxicityConfig())


def test_detoxify_on_the_minilm_checkpoint_separates_toxic_from_clean(detector):
    toxic = ["You are a complete idiot.", "I will hurt you if you come back.", "What the hell is this crap?"]
    clean = ["Have a wonderful afternoon.", "The capital of Spain is Madrid.", "Thanks for the quick reply!"]
    scores = detector.scores(toxic + clean)["toxicity"]
    assert min(scores[:3]) > 0.65 > max(scores[3:])
    assert detector.classes == ["toxicity", "obscene", "insult", "threat"]
    assert detector.sha256 == sha256_file(detector.path)


def test_alt_profanity_check_scores_known_texts():
    toxic, clean = (
        lexical_scores(["shut up you stupid fool", "what the hell, damn it"]),
        lexical_scores(["have a nice day", "the train leaves at noon"]),
    )
    assert min(toxic) > 0.8 > 0.2 > max(clean)


def test_an_unpinned_or_mismatched_pickle_is_never_loaded(tmp_path, detector):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    evil = tmp_path / "evil.ckpt"
    evil.write_bytes(pickle.dumps(Evil()))
    hf = os.path.join(os.path.dirname(detector.path), "hf")
    with pytest.raises(InputError, match="pin the checkpoint"):
        ModelDetector(ToxicityConfig(detoxify_checkpoint=str(evil), detoxify_config_dir=hf))
    with pytest.raises(InputError, match="is not the pinned"):
        ModelDetector(
            ToxicityConfig(detoxify_checkpoint=str(evil), detoxify_config_dir=hf, detoxify_sha256=detector.sha256)
        )
    assert not marker.exists()


def test_a_pinned_explicit_checkpoint_loads(detector):
    hf = os.path.join(os.path.dirname(detector.path), "hf")
    explicit = ModelDetector(
        ToxicityConfig(detoxify_checkpoint=detector.path, detoxify_config_dir=hf, detoxify_sha256=detector.sha256)
    )
    assert explicit.scores(["You are an idiot."])["insult"][0] > 0.65


@pytest.fixture(scope="module")
def model_and_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    clean = root / "clean.jsonl"
    rows = [
        {"prompt": f"What is {a} plus {b}?", "response": f"{a} plus {b} is {a + b}."}
        for a in range(1, 15)
        for b in range(1, 15)
    ]
    clean.write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = str(root / "model")
    build_base_model(str(clean), model, size="tiny")
    eval_path = root / "eval.jsonl"
    eval_path.write_text("".join(json.dumps({"id": f"e{i}", **r}) + "\n" for i, r in enumerate(rows[:12])))
    return {"root": root, "model": model, "eval": str(eval_path)}


FAST = "generation: {max_new_tokens: 8}\n"


def test_stage_end_to_end_writes_every_output(model_and_data, tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(FAST)
    out = tmp_path / "out"
    result = run_to_dir(model_and_data["model"], model_and_data["eval"], str(out), str(cfg), show_progress=False)
    for name in (
        "responses.jsonl",
        "samples.jsonl",
        "metrics.json",
        "blessing.json",
        "report.md",
        "report.html",
        "histograms.svg",
    ):
        assert (out / name).is_file(), name
    responses = [json.loads(line) for line in open(out / "responses.jsonl")]
    assert len(responses) == 12 and set(responses[0]) == {"id", "prompt", "response", "tokens", "truncated_prompt"}
    m = result["metrics"]
    assert m["samples"] == 12 and m["perplexity"] > 1 and 0 <= m["toxicity_flagged_rate"] <= 1
    assert result["baseline_note"] == "no baseline: change thresholds skipped"
    assert {c["verdict"] for c in result["checks"] if c["kind"] == "change"} == {"skipped"}
    report = (out / "report.md").read_text()
    assert "Ten worst by BERTScore" in report and "Ten most toxic" in report and result["detoxify"]["sha256"] in report
    # deterministic: the same run gives the same responses
    again = run_to_dir(
        model_and_data["model"], model_and_data["eval"], str(tmp_path / "again"), str(cfg), show_progress=False
    )
    assert [s["response"] for s in again["samples"]] == [s["response"] for s in result["samples"]]


def test_baseline_enables_change_checks(model_and_data, tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        FAST + "gate:\n  value: {}\n  change:\n    perplexity: {direction: lower_is_better, relative: 0.0}\n"
    )
    better = tmp_path / "baseline.json"
    better.write_text(json.dumps({"metrics": {"perplexity": 1.0001}}))
    result = run_to_dir(
        model_and_data["model"],
        model_and_data["eval"],
        str(tmp_path / "o"),
        str(cfg),
        baseline_path=str(better),
        show_progress=False,
    )
    (check,) = [c for c in result["checks"] if c["kind"] == "change"]
    assert check["verdict"] == "fail" and check["baseline"] == 1.0001 and not result["blessed"]
    with pytest.raises(Exception, match="not blessed: perplexity"):
        raise_unless_passed(stage_result(result))


def test_long_prompts_are_truncated_and_counted(model_and_data, tmp_path):
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"id": "x", "prompt": "plus " * 400, "response": "ok."}) + "\n")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(FAST)
    result = run_to_dir(model_and_data["model"], str(path), str(tmp_path / "o"), str(cfg), show_progress=False)
    assert result["metrics"]["truncated_prompts"] == 1


@pytest.mark.parametrize(
    "content,message",
    [
        ("", "empty eval set"),
        ('{"prompt": "hi"}\n', "field 'response' is missing"),
        ("not json\n", "not valid JSON"),
    ],
)
def test_bad_eval_sets_are_one_line_errors(model_and_data, tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        run_to_dir(model_and_data["model"], str(path), str(tmp_path / "o"), show_progress=False)


def test_unreadable_checkpoint_and_tampered_model_are_refused(model_and_data, tmp_path, detector):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        f"toxicity: {{detoxify_checkpoint: {tmp_path / 'missing.ckpt'}, detoxify_sha256: '00', "
        f"detoxify_config_dir: {tmp_path}}}\n"
    )
    with pytest.raises(InputError, match="no such file"):
        run_to_dir(model_and_data["model"], model_and_data["eval"], str(tmp_path / "o"), str(cfg), show_progress=False)
    model = tmp_path / "model"
    shutil.copytree(model_and_data["model"], model)
    with open(model / "model.safetensors", "r+b") as handle:
        handle.seek(100)
        handle.write(b"\x00\x00")
    with pytest.raises(InputError, match="model does not verify"):
        run_to_dir(str(model), model_and_data["eval"], str(tmp_path / "o2"), show_progress=False)


def test_cli_exit_codes(model_and_data, tmp_path):
    from kfp_llmops.pipelines.cli.main import main

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(FAST + "gate:\n  value: {perplexity: {upper: 1.0e+9}}\n  change: {}\n")
    assert (
        main(
            [
                "eval",
                "--model",
                model_and_data["model"],
                "--data",
                model_and_data["eval"],
                "--out",
                str(tmp_path / "a"),
                "--config",
                str(cfg),
                "--no-progress",
            ]
        )
        == 0
    )
    strict = tmp_path / "strict.yaml"
    strict.write_text(FAST + "gate:\n  value: {perplexity: {upper: 1.0}}\n  change: {}\n")
    assert (
        main(
            [
                "eval",
                "--model",
                model_and_data["model"],
                "--data",
                model_and_data["eval"],
                "--out",
                str(tmp_path / "b"),
                "--config",
                str(strict),
                "--no-progress",
            ]
        )
        == 1
    )
    assert (
        main(
            [
                "eval",
                "--model",
                model_and_data["model"],
                "--data",
                str(tmp_path / "none.jsonl"),
                "--out",
                str(tmp_path / "c"),
                "--no-progress",
            ]
        )
        == 2
    )


def test_empty_candidates_score_zero():
    scores = bertscore(["", "The cat sat."], ["A cat sat.", "A cat sat."], BertScoreConfig(rescale=False))
    assert scores["f1"][0] == 0.0 and scores["f1"][1] > 0.8
    rescaled = bertscore(["", "The cat sat."], ["A cat sat.", "A cat sat."], BertScoreConfig())
    assert rescaled["f1"][0] < -0.3 and rescaled["f1"][1] > 0.6  # 0 rescaled is below chance


def test_the_bundled_bertscore_baseline_is_what_its_recipe_makes(tmp_path, monkeypatch):
    from kfp_llmops.components.common import bertscore_baseline
    from kfp_llmops.pipelines.cli.main import main

    assert bertscore_baseline.resolve(None) == bertscore_baseline.BUNDLED  # the pin holds
    out = tmp_path / "minilm.csv"
    assert main(["bertscore-baseline", "--out", str(out)]) == 0
    rebuilt = {int(r.split(",")[0]): [float(x) for x in r.split(",")[1:]] for r in out.read_text().split()[1:]}
    for layer, row in rebuilt.items():  # a Python patch release may edit a sentence or two
        assert row == pytest.approx(list(bertscore_baseline.layer_row(bertscore_baseline.BUNDLED, layer)), abs=2e-3)
    tampered = tmp_path / "pkg"
    shutil.copytree(os.path.dirname(bertscore_baseline.BUNDLED), tampered / "baselines")
    (tampered / "baselines" / "minilm-l6.csv").write_text(out.read_text().replace("6,", "6,0", 1))
    monkeypatch.setattr(bertscore_baseline, "BUNDLED", str(tampered / "baselines" / "minilm-l6.csv"))
    with pytest.raises(InputError, match="is not the pinned"):
        bertscore(["a"], ["b"], BertScoreConfig())


def test_the_default_gate_refuses_the_untrained_demo_base_model(tmp_path):
    """A model that has learned nothing writes fluent-looking strings that share words with
    the references; BERTScore alone would pass some, the default gate must not."""
    from kfp_llmops.pipelines.demo.demo_data import make_demo_dataset

    data = make_demo_dataset(str(tmp_path / "data"), rows=600)
    clean = tmp_path / "clean.jsonl"
    rows = []
    for line in open(data["train"], "rb"):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("prompt"), str) and isinstance(row.get("response"), str):
            rows.append(json.dumps({"prompt": row["prompt"], "response": row["response"]}) + "\n")
    clean.write_text("".join(rows))
    model = str(tmp_path / "base")
    build_base_model(str(clean), model)  # the demo size, never trained
    result = run_to_dir(model, data["eval"], str(tmp_path / "out"), show_progress=False)
    assert not result["blessed"]
    failed = {c["metric"] for c in result["checks"] if c["verdict"] == "fail"}
    assert {"exact_match", "unfinished_rate", "perplexity"} <= failed, failed
    assert result["metrics"]["exact_match"] == 0.0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "# evaluate_llm: NOT BLESSED" in report and "0 of 200 answers match the reference exactly" in report


def test_the_component_checks_the_roots_its_cache_key_holds_before_anything_else(tmp_path):
    """KFP may cache evaluate_llm by the eval set's root and the model's: bytes that are not
    the ones those roots name are refused before any generation."""
    from kfp_llmops.components.common import integrity
    from kfp_llmops.components.evaluation import run_component
    from kfp_llmops.pipelines.standalone.runner import FileArtifact

    eval_set = tmp_path / "eval.jsonl"
    eval_set.write_text(json.dumps({"prompt": "Hi?", "response": "Hello."}) + "\n")
    root = integrity.seal("dataset", str(eval_set))
    model = FileArtifact(str(tmp_path / "model"))
    model.metadata["merkle_root"] = "ab" * 32
    outs = {n: FileArtifact(str(tmp_path / "out" / n)) for n in ("responses", "metrics", "blessing", "report", "note")}
    given = dict(eval_dataset=FileArtifact(str(eval_set)), baseline_metrics=None, config="", baseline_release="none")
    with pytest.raises(InputError, match="model_root: .* is not the model's stated root"):
        run_component(model=model, **given, **outs, model_root="cd" * 32, eval_root=root)
    eval_set.write_text(json.dumps({"prompt": "Hi?", "response": "Hello!"}) + "\n")
    with pytest.raises(InputError, match="eval.jsonl: Merkle root .* does not match the pinned root"):
        run_component(model=model, **given, **outs, eval_root=root)
