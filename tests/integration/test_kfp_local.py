"""The component and the release pipeline through kfp.local, and the GitOps compile check."""
import json
import os

import yaml

from kfp_llmops.components import images
from kfp_llmops.components.common import merkle
from kfp_llmops.components.training import checkpoints
from kfp_llmops.components.training.base_model import verify_model_dir
from kfp_llmops.pipelines import compile as compile_mod
from kfp_llmops.pipelines.local_run import format_summary, run_local


TRAIN = "steps: 6\ncheckpoint_interval: 3\nmicro_batch: 4\nseq_len: 48\n"


def test_release_pipeline_runs_through_kfp_local(tmp_path):
    summary = run_local(str(tmp_path / "run"), rows=800, train_config=TRAIN, base_model_size="tiny",
                        eval_config="generation: {max_new_tokens: 8}\ngate:\n  value: {}\n")
    validate, train, evaluate, watermark, deployed = summary["stages"]
    assert validate["stage"] == "validate_dataset" and validate["gate"] == "passed"
    clean = validate["outputs"]["clean"]
    digest = merkle.hash_file(clean, "clean.jsonl")
    assert merkle.Manifest(merkle.DEFAULT_CHUNK_SIZE, [digest]).root.hex() == validate["merkle_root"]
    assert open(validate["outputs"]["report"]).read().startswith("# Data validation: PASSED")
    assert train["stage"] == "train_zero3" and train["gate"] == "trained"
    assert verify_model_dir(train["outputs"]["model"]) == train["merkle_root"]
    ckpt_dir = train["outputs"]["checkpoints"]
    assert checkpoints.read_latest(ckpt_dir) == "step-00000006"
    assert checkpoints.verify(os.path.join(ckpt_dir, "step-00000006"), expected_root=train["checkpoint_root"]).ok
    _, stated = checkpoints.load(os.path.join(ckpt_dir, "step-00000006"))
    assert stated["meta"]["dataset_root"] == validate["merkle_root"]       # lineage: data -> checkpoint
    assert "<img alt='loss curve' src='data:image/png;base64," in open(train["outputs"]["report"]).read()
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["stages"][1]["gate"] == "trained"
    assert evaluate["stage"] == "evaluate_llm" and evaluate["gate"] == "blessed"
    assert evaluate["merkle_root"] == train["merkle_root"]                  # lineage: evaluated what was trained
    blessing = json.load(open(evaluate["outputs"]["blessing"]))
    assert blessing["blessed"] and blessing["baseline_note"] == "no baseline: change thresholds skipped"
    assert len(open(evaluate["outputs"]["responses"]).readlines()) == 200
    assert watermark["stage"] == "verify_watermark" and watermark["merkle_root"] == train["merkle_root"]
    assert watermark["gate"] == "verified"
    # First release into an empty serving state: smoke tests and one interval at 100 %, then promoted.
    assert deployed["stage"] == "triton_canary_deploy" and deployed["gate"] == "promoted"
    record = json.load(open(deployed["outputs"]["record"]))
    assert record["model_root"] == train["merkle_root"] and record["first_release"]      # deployed what was blessed
    assert record["repository_root"] == deployed["merkle_root"]
    assert all(c["passed"] for c in record["smoke"][0]["checks"])                        # watermark found in serving
    state = json.load(open(tmp_path / "run" / "serving" / "state.json"))
    assert state["stable"]["repository_root"] == record["repository_root"]
    assert "watermark.key" not in open(os.path.join(compile_mod.COMPILED_DIR, "release.yaml")).read()
    assert "train_zero3" in format_summary(summary)


def test_gate_failure_skips_training(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(["not json"] * 10 + ['{"text": "fine row"}']) + "\n")
    summary = run_local(str(tmp_path / "run"), dataset=str(bad))
    assert [(s["stage"], s["gate"]) for s in summary["stages"]] == [("validate_dataset", "failed"),
                                                                   ("train_zero3", "skipped")]


def test_compile_is_deterministic_and_check_detects_drift(tmp_path):
    first = compile_mod.compile_one("release")
    assert compile_mod.compile_one("release") == first
    assert compile_mod.compile_all(str(tmp_path)) == ["release"]
    assert compile_mod.compile_all(str(tmp_path), check=True) == []
    path = tmp_path / "release.yaml"
    path.write_text(path.read_text().replace("balanced", "strict", 1))
    assert compile_mod.compile_all(str(tmp_path), check=True) == ["release"]


def test_committed_yaml_is_current_and_uses_the_versioned_image():
    assert compile_mod.compile_all(compile_mod.COMPILED_DIR, check=True) == []
    spec = yaml.safe_load(open(os.path.join(compile_mod.COMPILED_DIR, "release.yaml")))
    executors = spec["deploymentSpec"]["executors"]
    images_used = {e["container"]["image"] for e in executors.values() if "container" in e}
    assert images_used == {images.DATA, images.TRAIN, images.EVAL}
    assert "pip install" not in json.dumps(executors)   # air-gapped clusters: nothing installed at run time
