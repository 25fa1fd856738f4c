"""The component and the release pipeline through kfp.local, and the GitOps compile check."""

import glob
import json
import os

import pytest
import yaml

from helpers import flip_byte
from kfp_llmops.components import images
from kfp_llmops.components.common import integrity, merkle
from kfp_llmops.components.training import checkpoints
from kfp_llmops.pipelines import compile as compile_mod
from kfp_llmops.pipelines.demo.demo_data import DEMO_DEPLOY, OPEN_HELD_OUT
from kfp_llmops.pipelines.demo.local_run import format_summary, run_local

TRAIN = "steps: 6\ncheckpoint_interval: 3\nmicro_batch: 4\nseq_len: 48\n"
# The engine is not these runs' subject (test_vllm_serving serves the judged answers through
# vLLM, test_deploy rolls it out, the image DAG runs it in the deploy image): the transformers
# engine starts in ~6 s where vLLM takes ~24 s, for every server of every run. Stable and
# canary share it: a canary on another engine differs in speed by what the engines are.
ENGINE = "serving: {engine: transformers}\n"
# Latency is not what these runs judge (test_deploy's drills do): two servers of the same
# model on two busy cores differ by 2x in a 3 s interval, so the tolerance is wide, and a
# canary the noise still rolls back fails no pipeline.
CANARY = (
    "interval_s: 3\nsteps: [50, 100]\nsmoke: {max_new_tokens: 64}\n"
    "gate: {min_requests: 10, latency_tolerance: 3.0}\nfail_on_rollback: false\n" + ENGINE
)
# The first release verifies the watermark as the demo does (DEMO_DETECTION: 200 long
# texts and the trade-off curve); the later pipelines, there for their shapes and their
# baselines, detect it on 48 long texts with no curve.
QUICK_DETECTION = (
    "delta: 2.0\n"
    f"generation: {{max_new_tokens: 112, min_new_tokens: 112, texts: 48, prompts: {json.dumps(OPEN_HELD_OUT)}}}\n"
)


def test_release_pipeline_runs_through_kfp_local(tmp_path, capfd):
    summary = run_local(
        str(tmp_path / "run"),
        rows=800,
        train_config=TRAIN,
        base_model_size="tiny",
        eval_config="generation: {max_new_tokens: 8}\ngate:\n  value: {}\n",
        deploy_config=DEMO_DEPLOY + ENGINE,
        ask_served=True,
    )
    validate, train, evaluate, watermark, deployed = summary["stages"]
    # The held-out questions asked of the promoted model through nginx: the watermark stage
    # costed the blessed decoding, so the served rate is the one it measured.
    served = summary["served"]
    assert served["questions"] == 200 and served["exact_match"] == watermark["exact_match_watermarked"], served
    marked = json.load(open(os.path.join(os.path.dirname(watermark["outputs"]["report"]), "work", "metrics.json")))
    assert (
        marked["decoding"]["max_new_tokens"]
        == 8
        == json.load(open(evaluate["outputs"]["blessing"]))["decoding"]["max_new_tokens"]
    )
    assert validate["stage"] == "validate_dataset" and validate["gate"] == "passed"
    clean = validate["outputs"]["clean"]
    digest = merkle.hash_file(clean, "clean.jsonl")
    assert merkle.Manifest(merkle.DEFAULT_CHUNK_SIZE, [digest]).root.hex() == validate["merkle_root"]
    assert open(validate["outputs"]["report"]).read().startswith("# Data validation: PASSED")
    assert train["stage"] == "train_zero3" and train["gate"] == "trained"
    assert integrity.verify("model", train["outputs"]["model"]) == train["merkle_root"]
    ckpt_dir = train["outputs"]["checkpoints"]
    assert checkpoints.read_latest(ckpt_dir) == "step-00000006"
    assert integrity.verify_checkpoint(
        os.path.join(ckpt_dir, "step-00000006"), expected_root=train["checkpoint_root"]
    ).ok
    _, stated = integrity.load_checkpoint(os.path.join(ckpt_dir, "step-00000006"))
    assert stated["meta"]["dataset_root"] == validate["merkle_root"]  # lineage: data -> checkpoint
    assert "<img alt='loss curve' src='data:image/png;base64," in open(train["outputs"]["report"]).read()
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["stages"][1]["gate"] == "trained"
    assert evaluate["stage"] == "evaluate_llm" and evaluate["gate"] == "blessed"
    assert evaluate["merkle_root"] == train["merkle_root"]  # lineage: evaluated what was trained
    blessing = json.load(open(evaluate["outputs"]["blessing"]))
    assert blessing["blessed"] and blessing["baseline_note"] == (
        "first release: no promoted release to compare with; change thresholds skipped"
    )
    assert len(open(evaluate["outputs"]["responses"]).readlines()) == 200
    assert watermark["stage"] == "verify_watermark" and watermark["merkle_root"] == train["merkle_root"]
    assert watermark["gate"] == "verified"
    # First release into an empty serving state: smoke tests and one interval at 100 %, then promoted.
    assert deployed["stage"] == "triton_canary_deploy" and deployed["gate"] == "promoted"
    record = json.load(open(deployed["outputs"]["record"]))
    assert record["model_root"] == train["merkle_root"] and record["first_release"]  # deployed what was blessed
    assert record["repository_root"] == deployed["merkle_root"]
    assert all(c["verdict"] == "pass" for c in record["smoke"][0]["checks"])  # watermark found in serving
    state = json.load(open(tmp_path / "run" / "serving" / "state.json"))
    assert state["stable"]["repository_root"] == record["repository_root"]
    assert "watermark.key" not in open(os.path.join(compile_mod.COMPILED_DIR, "release.yaml")).read()
    assert "train_zero3" in format_summary(summary)
    _signed_and_attested(summary, tmp_path)
    _lineage_is_proven_then_refuted_at_the_broken_link(summary["release_record"], tmp_path)
    _evaluate_deploy_rolls_a_canary_out_against_the_released_stable(train, tmp_path)
    _continued_training_is_judged_against_the_promoted_release(summary, train, tmp_path)
    _altered_baseline_stats_are_refused(tmp_path, capfd)


def _continued_training_is_judged_against_the_promoted_release(first, train, tmp_path):
    """Training continues from the first release's verified checkpoint on the same data,
    with the promoted release (the first) as its baseline: drift is measured against its
    data, the blessing's change thresholds and win rate against its model, and the canary
    runs over run/serving, whose stable (evaluate-deploy's v2) serves that same model."""
    from kfp_llmops.pipelines.demo.local_run import collect_stages
    from kfp_llmops.pipelines.release import LOCAL_PIPELINES

    run = tmp_path / "run"
    record = json.load(open(first["release_record"]))
    pointer = json.load(open(run / "releases" / "promoted.json"))
    assert pointer["record"] == first["release_record"] and record["decision"] == "promoted"
    assert record["stages"]["evaluate_llm"]["metrics"]["exact_match"] >= 0
    LOCAL_PIPELINES["continue-training"](
        dataset_uri=str(run / "data" / "train.jsonl"),
        eval_dataset_uri=str(run / "data" / "eval.jsonl"),
        model_uri=train["outputs"]["model"],
        model_root=train["merkle_root"],
        checkpoint_uri=train["outputs"]["checkpoints"],
        checkpoint_root=train["checkpoint_root"],
        train_config=TRAIN.replace("steps: 6", "steps: 9"),
        eval_config="generation: {max_new_tokens: 8}\ngate:\n  value: {}\n",
        watermark_config=QUICK_DETECTION,
        watermark_key_file=str(run / "watermark.key"),
        deploy_config=CANARY,
        serving_state_dir=str(run / "serving"),
        release_dir=str(tmp_path / "release3"),
        baseline_release=str(run / "releases" / "promoted.json"),
    )
    continued = json.load(open(tmp_path / "release3" / "record.json"))
    trained = continued["stages"]["train_zero3"]
    assert trained["outputs"]["checkpoints"]["tag"] == "step-00000009"  # resumed at 6, ran to 9
    ckpt = trained["outputs"]["checkpoints"]["path"]
    _, stated = integrity.load_checkpoint(os.path.join(ckpt, "step-00000009"))
    assert stated["meta"]["previous_root"] == train["checkpoint_root"]  # the hash chain continues
    validate, _, evaluate, *_ = collect_stages(str(run / "pipeline_root"))  # this run's: the latest
    assert "PSI length 0.000" in validate["detail"], validate["detail"]  # same data: no drift
    assert "Compared with baseline: promoted release" in open(validate["outputs"]["report"]).read()
    blessing = json.load(open(evaluate["outputs"]["blessing"]))
    changes = [c for c in blessing["checks"] if c["kind"] == "change"]
    assert changes and all(c["verdict"] == "pass" and c["baseline"] is not None for c in changes), changes
    assert os.path.basename(os.path.dirname(first["release_record"])) in blessing["baseline_note"]
    # The promoted model answered the same prompts and the judge compared each pair.
    (win,) = [c for c in blessing["checks"] if c["metric"] == "win_rate"]
    assert win["kind"] == "win rate" and 0 <= win["value"] <= 1, win
    counts = [int(n.split()[0]) for n in win["reason"].split(", ")]
    assert (
        sum(counts) == 200
        and "win rate" in evaluate["detail"]
        and "Against promoted release" in open(evaluate["outputs"]["report"]).read()
    )
    assert continued["stages"]["triton_canary_deploy"]["result"] in ("promoted", "rolled_back")


def _altered_baseline_stats_are_refused(tmp_path, capfd):
    """The promoted release's data stats altered on disk: the next run refuses them in one
    line before validation runs."""
    promoted = json.load(open(json.load(open(tmp_path / "run" / "releases" / "promoted.json"))["record"]))
    with open(promoted["stages"]["validate_dataset"]["outputs"]["stats"]["path"], "a") as handle:
        handle.write(" ")
    capfd.readouterr()
    with pytest.raises(Exception, match="FAILURE"):
        run_local(str(tmp_path / "run"), rows=800, train_config=TRAIN, base_model_size="tiny")
    out = capfd.readouterr()
    assert "baseline data stats" in out.out + out.err and "do not verify" in out.out + out.err
    said = [line for line in (out.out + out.err).splitlines() if "do not verify" in line]
    assert said[0].lstrip().startswith("error: ") and "Traceback" not in out.out + out.err, said  # one line
    third = json.load(open(sorted(glob.glob(str(tmp_path / "run" / "releases" / "run-*" / "record.json")))[-1]))
    assert third["status"] == "FAILED" and "validate_dataset" not in third["stages"]


def _evaluate_deploy_rolls_a_canary_out_against_the_released_stable(train, tmp_path):
    from kfp_llmops.pipelines.release import LOCAL_PIPELINES

    run = tmp_path / "run"
    LOCAL_PIPELINES["evaluate-deploy"](
        model_uri=train["outputs"]["model"],
        model_root=train["merkle_root"],
        eval_dataset_uri=str(run / "data" / "eval.jsonl"),
        eval_config="generation: {max_new_tokens: 8}\ngate:\n  value: {}\n",
        watermark_config=QUICK_DETECTION,
        watermark_key_file=str(run / "watermark.key"),
        deploy_config=CANARY,
        serving_state_dir=str(run / "serving"),
        release_dir=str(tmp_path / "release2"),
        # judged against what run/serving serves: the first run's promoted release (a
        # blessing judged against none would be refused: production moved on since)
        baseline_release=str(run / "releases" / "promoted.json"),
    )
    record = json.load(open(tmp_path / "release2" / "record.json"))
    assert list(record["stages"]) == ["evaluate_llm", "verify_watermark", "triton_canary_deploy"]
    assert record["decision"] == "promoted", record["stages"]["triton_canary_deploy"]["reason"]
    state = json.load(open(run / "serving" / "state.json"))
    assert state["stable"]["version"] == 2 and state["previous"]["version"] == 1  # a real canary against v1
    deployed = record["stages"]["triton_canary_deploy"]["inputs"]
    assert deployed["production_root"] == train["merkle_root"] and deployed["compared_with"].startswith(
        str(run / "releases")
    )


def _signed_and_attested(summary, tmp_path):
    """The release ends signed: the model and repository (the upstream CLI agrees) and a
    signed SLSA provenance that lineage verify checks; a flipped byte in what stable
    serves is caught there, not trusted from the state file."""
    import glob
    import subprocess
    import sys

    from kfp_llmops.components.release.lineage import load_record, verify
    from kfp_llmops.pipelines.cli.main import main

    prov, public = summary["provenance"], summary["public_key"]
    assert json.load(open(prov))["payloadType"] == "application/vnd.in-toto+json"
    assert main(["lineage", "verify", prov, "--public-key", public]) == 0
    record = json.load(open(summary["release_record"]))
    stages = record["stages"]
    for folder in (
        stages["train_zero3"]["outputs"]["model"]["path"],
        stages["triton_canary_deploy"]["outputs"]["repository"]["path"],
    ):
        done = subprocess.run(
            [
                os.path.join(os.path.dirname(sys.executable), "model_signing"),
                "verify",
                "key",
                folder,
                "--signature",
                os.path.join(folder, "model.sig"),
                "--public_key",
                public,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-500:]
    served = glob.glob(str(tmp_path / "run" / "serving" / "stable" / "llm" / "*" / "weights" / "model.safetensors"))
    assert len(served) == 1
    flip_byte(served[0], 4096)
    try:
        ok, links = verify(load_record(prov, public), public)
        broken = {link.link: link.detail for link in links if not link.ok}
        assert not ok and set(broken) == {"served bytes", "served signature"}, broken
        assert "model.safetensors" in broken["served bytes"] and "model.safetensors" in broken["served signature"]
    finally:
        flip_byte(served[0], 4096)  # flipped back: later releases meet this stable
    assert main(["lineage", "verify", summary["release_record"]]) == 0


def _lineage_is_proven_then_refuted_at_the_broken_link(record_path, tmp_path):
    from kfp_llmops.pipelines.cli.main import main

    record = json.load(open(record_path))
    assert record["status"] == "SUCCEEDED" and record["decision"] == "promoted"
    assert list(record["stages"]) == [
        "validate_dataset",
        "build_base_model",
        "train_zero3",
        "evaluate_llm",
        "verify_watermark",
        "triton_canary_deploy",
    ]
    assert "| triton_canary_deploy | promoted |" in open(record_path.replace(".json", ".md")).read()
    assert main(["lineage", "verify", record_path]) == 0
    # A record claiming training used another dataset: refuted at that link.
    forged = json.loads(json.dumps(record))
    forged["stages"]["train_zero3"]["inputs"]["dataset_root"] = "00" * 32
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    assert main(["lineage", "verify", str(tmp_path / "forged.json")]) == 1
    # The deployed repository changed on disk after the release: refuted, the link named.
    repo = record["stages"]["triton_canary_deploy"]["outputs"]["repository"]["path"]
    config = os.path.join(repo, "llm", "config.pbtxt")
    with open(config, "a") as handle:
        handle.write("# edited after release\n")
    from kfp_llmops.components.release.lineage import verify

    ok, links = verify(record)
    assert not ok and [link.link for link in links if not link.ok] == ["deployed repository"]


def test_gate_failure_skips_training(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(["not json"] * 10 + ['{"text": "fine row"}']) + "\n")
    summary = run_local(str(tmp_path / "run"), dataset=str(bad))
    assert [(s["stage"], s["gate"]) for s in summary["stages"]] == [
        ("validate_dataset", "failed"),
        ("train_zero3", "skipped"),
    ]
    record = json.load(open(summary["release_record"]))  # the exit handler ran all the same
    assert record["stages"]["validate_dataset"]["result"] == "failed" and record["decision"] is None
    from kfp_llmops.components.release.lineage import verify

    ok, links = verify(record)
    assert not ok and links[0].link == "validated dataset" and "did not pass" in links[0].detail


def test_compile_is_deterministic_and_check_detects_drift(tmp_path):
    first = compile_mod.compile_one("release")
    assert compile_mod.compile_one("release") == first
    written = compile_mod.compile_all(str(tmp_path))
    assert {"release.yaml", "k8s/release.yaml", "argo/release.yaml", "evaluate-deploy.yaml"} <= set(written)
    assert compile_mod.compile_all(str(tmp_path), check=True) == []
    path = tmp_path / "release.yaml"
    path.write_text(path.read_text().replace("balanced", "strict", 1))
    assert compile_mod.compile_all(str(tmp_path), check=True) == ["release.yaml"]


def test_committed_yaml_is_current_and_uses_the_versioned_image():
    assert compile_mod.compile_all(compile_mod.COMPILED_DIR, check=True) == []
    spec = next(yaml.safe_load_all(open(os.path.join(compile_mod.COMPILED_DIR, "release.yaml"))))
    executors = spec["deploymentSpec"]["executors"]
    images_used = {e["container"]["image"] for e in executors.values() if "container" in e}
    assert images_used == {images.BASE, images.DATA, images.TRAIN, images.EVAL, images.DEPLOY}
    assert "pip install" not in json.dumps(executors)  # air-gapped clusters: nothing installed at run time
