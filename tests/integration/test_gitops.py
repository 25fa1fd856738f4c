"""GitOps targets: golden (committed) output for kfp, k8s and argo, schema validation of
every generated manifest, the standalone stage runner the Argo target uses (the whole
release DAG through `llmops stage run`), and `llmops submit`'s failure path."""

import json
import os

import jsonschema
import pytest
import yaml

from kfp_llmops.components import images
from kfp_llmops.pipelines import compile as compile_mod
from kfp_llmops.pipelines.cli.main import main
from kfp_llmops.pipelines.demo.demo_data import make_demo_dataset
from strict_schema import validate as strict

SCHEMAS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "schemas")


def _load(target):
    return list(yaml.safe_load_all(open(compile_mod.output_path(compile_mod.COMPILED_DIR, "release", target))))


def test_every_target_is_committed_current_and_byte_deterministic(tmp_path):
    assert compile_mod.compile_all(compile_mod.COMPILED_DIR, check=True) == []
    for target in compile_mod.TARGETS:
        assert compile_mod.compile_one("release", target) == compile_mod.compile_one("release", target)
    assert main(["compile", "--target", "argo", "--out", str(tmp_path)]) == 0
    assert os.listdir(tmp_path) == ["argo"]
    stale = tmp_path / "argo" / "release.yaml"
    stale.write_text(stale.read_text().replace("retryPolicy: OnFailure", "retryPolicy: Always"))
    assert main(["compile", "--target", "argo", "--out", str(tmp_path), "--check"]) == 2  # the drift gate


def test_k8s_target_is_a_pipeline_and_a_valid_pipelineversion():
    for name in compile_mod.PIPELINES:
        for doc in yaml.safe_load_all(open(compile_mod.output_path(compile_mod.COMPILED_DIR, name, "k8s"))):
            strict(doc)
    pipeline, version = _load("k8s")
    assert pipeline["kind"] == "Pipeline" and version["kind"] == "PipelineVersion"
    assert version["spec"]["pipelineName"] == pipeline["metadata"]["name"] == "llmops-release"
    assert version["metadata"]["name"] == compile_mod.version_name("release")
    assert version["spec"]["pipelineSpec"]["pipelineInfo"]["name"] == "llmops-release"
    bad = json.loads(json.dumps(version))
    del bad["spec"]["pipelineSpec"]
    with pytest.raises(jsonschema.ValidationError):
        strict(bad)


def test_argo_target_is_a_valid_standalone_workflowtemplate_of_the_same_dag():
    (doc,) = _load("argo")
    strict(doc)
    spec = doc["spec"]
    assert spec["onExit"] == "release-record"
    main_dag = next(t for t in spec["templates"] if t["name"] == spec["entrypoint"])
    tasks = {t["name"]: t for t in main_dag["dag"]["tasks"]}
    assert list(tasks) == [
        "validate-dataset",
        "build-base-model",
        "train-zero3",
        "evaluate-llm",
        "verify-watermark",
        "triton-canary-deploy",
    ]  # every stage, in order (none dropped)
    assert tasks["build-base-model"]["when"] == "'{{tasks.validate-dataset.outputs.parameters.result}}' == 'true'"
    assert tasks["verify-watermark"]["when"] == "'{{tasks.evaluate-llm.outputs.parameters.result}}' == 'true'"
    assert tasks["triton-canary-deploy"]["when"] == "'{{tasks.verify-watermark.outputs.parameters.result}}' == 'true'"
    assert tasks["triton-canary-deploy"]["depends"] == "verify-watermark.Succeeded"
    by_name = {t["name"]: t for t in spec["templates"]}
    assert by_name["train-zero3"]["retryStrategy"]["limit"] == "2"
    assert by_name["train-zero3"]["container"]["image"] == images.TRAIN
    assert by_name["triton-canary-deploy"]["container"]["image"] == images.DEPLOY
    assert by_name["triton-canary-deploy"]["serviceAccountName"] == "llmops-deploy"
    assert by_name["validate-dataset"]["serviceAccountName"] == "llmops-data"  # engine: ray creates a RayJob
    args = by_name["validate-dataset"]["container"]["args"]
    assert args[args.index("data_engine={{workflow.parameters.data_engine}}") - 1] == "--param"
    assert "serviceAccountName" not in by_name["evaluate-llm"]  # no API access where none is needed
    # The keys reach the pods only as mounted Secrets: no parameter carries them or their paths.
    assert {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v} == {
        "llmops-watermark-key",
        "llmops-signing-key",
        "llmops-api-keys",
    }
    assert not [p for p in spec["arguments"]["parameters"] if "key" in p["name"]]
    for t in ("verify-watermark", "triton-canary-deploy"):
        assert {
            "name": "watermark-key",
            "mountPath": "/var/run/secrets/kfp-llmops/watermark",
            "readOnly": True,
        } in by_name[t]["container"]["volumeMounts"]
    for t in ("train-zero3", "triton-canary-deploy", "release-record"):  # those that sign or check signatures
        assert {"name": "signing-key", "mountPath": "/var/run/secrets/kfp-llmops/signing", "readOnly": True} in by_name[
            t
        ]["container"]["volumeMounts"]
    for t in ("evaluate-llm", "validate-dataset"):
        assert not [m for m in by_name[t]["container"]["volumeMounts"] if m["name"].endswith(("-key", "-keys"))]
    keyed = [
        t for t in by_name if "api-keys" in {m["name"] for m in by_name[t].get("container", {}).get("volumeMounts", [])}
    ]
    assert keyed == ["triton-canary-deploy"]
    bad = json.loads(json.dumps(doc))
    bad["spec"]["templates"][1]["container"]["volumeMounts"] = "work"
    with pytest.raises(jsonschema.ValidationError):
        strict(bad)


def test_standalone_stage_runner_runs_the_release_dag_and_its_lineage_verifies(tmp_path, monkeypatch):
    data = make_demo_dataset(str(tmp_path / "data"), 600)
    key = tmp_path / "key"
    key.write_text("123456789")
    work, release = str(tmp_path / "work"), str(tmp_path / "release")
    common = ["--work", work, "--param", f"release_dir={release}"]
    params = {
        # a chunk size other than the default: every later stage re-hashes at the recorded one
        "validate_dataset": [f"dataset_uri={data['train']}", 'data_config={"chunk_size": 65536}'],
        "build_base_model": ["base_model_size=tiny"],
        "train_zero3": ["train_config=steps: 4\ncheckpoint_interval: 2\nmicro_batch: 4\nseq_len: 48\n"],
        "evaluate_llm": [
            f"eval_dataset_uri={data['eval']}",
            "eval_config=generation: {max_new_tokens: 8}\ngate:\n  value: {}\n",
        ],
        "verify_watermark": [
            f"eval_dataset_uri={data['eval']}",
            f"watermark_key_file={key}",
            "watermark_config=delta: 4.0\ngeneration: {max_new_tokens: 112, min_new_tokens: 112}\n",
        ],
        "triton_canary_deploy": [
            f"watermark_key_file={key}",
            f"serving_state_dir={tmp_path / 'serving'}",
            # the engine is not this test's subject: transformers starts in a quarter of vLLM's time
            "deploy_config=interval_s: 3\nsmoke: {max_new_tokens: 64}\nserving: {engine: transformers}\n",
        ],
        "release_record": ["status=Succeeded", "run=standalone-test"],
    }
    for stage, extra in params.items():
        args = ["stage", "run", stage, *common]
        for p in extra:
            args += ["--param", p]
        assert main(args) == 0, stage
    assert open(os.path.join(work, "evaluate_llm", "result")).read() == "true"
    meta = json.load(open(os.path.join(work, "train_zero3", "model.metadata.json")))
    clean = json.load(open(os.path.join(work, "validate_dataset", "clean.metadata.json")))
    assert clean["chunk_size"] == 65536 and meta["merkle_root"] and meta["dataset_root"] == clean["merkle_root"]
    record = os.path.join(release, "record.json")
    assert json.load(open(record))["decision"] == "promoted"
    assert main(["lineage", "verify", record]) == 0


def test_submit_fails_in_one_line_without_a_server(capsys):
    assert main(["submit", "--host", "http://127.0.0.1:9", "--param", "dataset_uri=x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: http://127.0.0.1:9: submit failed") and err.count("\n") == 1
    assert main(["submit", "--host", "http://127.0.0.1:9", "--param", "novalue"]) == 2


def test_cluster_form_mounts_secret_pvcs_and_requests_gpus():
    spec = yaml.safe_load_all(open(compile_mod.output_path(compile_mod.COMPILED_DIR, "release", "kfp")))
    docs = list(spec)
    platform = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    train = platform["exec-train-zero3"]
    assert {p["mountPath"] for p in train["pvcMount"]} == {"/mnt/checkpoints", "/mnt/release"}
    assert train["tolerations"][0]["key"] == "nvidia.com/gpu"
    for task in ("exec-verify-watermark", "exec-triton-canary-deploy"):
        assert platform[task]["secretAsVolume"][0]["mountPath"] == "/var/run/secrets/kfp-llmops/watermark"
    assert "secretAsVolume" not in platform["exec-evaluate-llm"]  # the key only where it is used
    api_keys = {
        e: [v for v in p.get("secretAsVolume", []) if v["secretName"] == "llmops-api-keys"] for e, p in platform.items()
    }
    assert {e for e, v in api_keys.items() if v} == {"exec-triton-canary-deploy"}  # its own requests through doors
    assert api_keys["exec-triton-canary-deploy"][0]["mountPath"] == "/var/run/secrets/kfp-llmops/api-keys"
    assert "AWS_ACCESS_KEY_ID" in json.dumps(platform["exec-validate-dataset"]["secretAsEnv"])
    assert "secretAsEnv" not in platform["exec-train-zero3"]
    resources = docs[0]["deploymentSpec"]["executors"]["exec-train-zero3"]["container"]["resources"]
    assert "accelerator" in json.dumps(resources)
