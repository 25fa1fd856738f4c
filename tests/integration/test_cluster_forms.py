"""The cluster forms read as the servers will read them: every compiled IR resolves the
way the KFP v2 driver resolves it, every generated manifest passes its official schema
with unknown fields rejected, every task has a size and a deadline, every parameter a
description and the same name in every form, and `llmops submit` runs a named, immutable
pipeline version."""

import copy
import json
import os
import subprocess

import jsonschema
import pytest
import yaml
from kfp import dsl

from kfp_llmops.components.common.config import StageConfig
from kfp_llmops.pipelines import argo, ir_check
from kfp_llmops.pipelines import compile as compile_mod
from kfp_llmops.pipelines import params as P
from kfp_llmops.pipelines.cli.main import main as main_cli
from kfp_llmops.pipelines.manifests import MANIFESTS_DIR
from kfp_llmops.pipelines.release import CACHE_TASKS, LOCAL_PIPELINES, PIPELINES, TIMEOUT
from kfp_llmops.pipelines.submit import publish_and_run
from strict_schema import validate as strict

NAMES = sorted(PIPELINES)


def _docs(name, target):
    return [d for d in yaml.safe_load_all(open(compile_mod.output_path(compile_mod.COMPILED_DIR, name, target))) if d]


def _ir(name):
    return _docs(name, "kfp")


@pytest.mark.parametrize("target", ["kfp", "k8s"])
@pytest.mark.parametrize("name", NAMES)
def test_every_committed_ir_resolves_as_the_kfp_driver_resolves_it(name, target):
    assert ir_check.check_documents(_docs(name, target)) == []


def test_the_resolver_finds_what_the_driver_would_fail_on():
    spec, platform = _ir("release")
    broken = copy.deepcopy(spec)
    cond = next(c for c in broken["components"].values() if "train-zero3" in c.get("dag", {}).get("tasks", {}))
    del cond["inputDefinitions"]["parameters"]["pipelinechannel--gpu_count"]
    found = ir_check.problems(broken, platform)
    assert any("gpu_count" in p and "parent DAG" in p for p in found), found
    broken = copy.deepcopy(spec)
    cond = next(c for c in broken["components"].values() if "train-zero3" in c.get("dag", {}).get("tasks", {}))
    del cond["inputDefinitions"]["parameters"]["pipelinechannel--checkpoint_pvc"]
    assert any("kubernetes setting" in p and "checkpoint_pvc" in p for p in ir_check.problems(broken, platform))
    broken = copy.deepcopy(spec)
    train = cond = next(c for c in broken["components"].values() if "train-zero3" in c.get("dag", {}).get("tasks", {}))
    train = cond["dag"]["tasks"]["train-zero3"]
    del train["inputs"]["parameters"]["pipelinechannel--train_cpu"]
    assert any("train_cpu" in p and "not given" in p for p in ir_check.problems(broken, platform))


def _tasks(spec):
    """(dag, task name, task) of every task, nested DAGs included."""
    for name, comp in {"root": spec["root"], **spec["components"]}.items():
        for task_name, task in comp.get("dag", {}).get("tasks", {}).items():
            yield name, task_name, task


@pytest.mark.parametrize("name", NAMES)
def test_only_side_effect_free_stages_are_cached_and_their_keys_hold_what_they_read(name):
    """KFP caches validate and evaluate: each takes the pinned baseline from pin-baseline
    and the imported data's root from an uncached fingerprint task, never the per-run
    release folder, and files its note through an uncached task. Everything else always runs."""
    spec = _docs(name, "k8s")[-1]["spec"]["pipelineSpec"]
    cached = {
        task["taskInfo"]["name"]
        for _, _, task in _tasks(spec)
        if task.get("cachingOptions", {}).get("enableCache") and not task["taskInfo"]["name"].startswith("import")
    }
    assert cached == {"validate-dataset", "evaluate-llm"} & {t["taskInfo"]["name"] for _, _, t in _tasks(spec)}
    parents, keyed = ir_check._parents(spec), {key: task for _, key, task in _tasks(spec)}
    for dag, _, task in _tasks(spec):
        stage = task["taskInfo"]["name"]
        if stage not in ("validate-dataset", "evaluate-llm"):
            continue
        given = task["inputs"]["parameters"]
        assert "release_dir" not in given

        def producer(name, dag=dag, given=given):
            origin = ir_check._origin(spec, parents, dag, given[name], "parameters")
            return keyed[origin[2]]["taskInfo"]["name"]

        assert producer("baseline_release") == "pin-baseline"
        assert producer("raw_root" if stage == "validate-dataset" else "eval_root").startswith("fingerprint-")
        if stage == "validate-dataset":  # the engine is a run's choice; the outputs do not depend on it
            assert ir_check._origin(spec, parents, dag, given["engine"], "parameters") == ("pipeline", "data_engine")
    assert ir_check.cache_problems(spec) == []
    # Put back what the stages read before: the per-run release folder, an unpinned eval set.
    broken = copy.deepcopy(spec)
    for _, _, task in _tasks(broken):
        if task["taskInfo"]["name"] == "evaluate-llm":
            task["inputs"]["parameters"]["release_dir"] = {
                "runtimeValue": {"constant": "/mnt/release/{{$.pipeline_job_uuid}}"}
            }
            del task["inputs"]["parameters"]["eval_root"]
    found = ir_check.cache_problems(broken)
    assert any("release_dir" in p and "every run" in p for p in found), found
    assert any("eval_dataset" in p and "imported" in p for p in found), found


def test_the_sdk_alone_compiles_what_the_driver_refuses(tmp_path):
    """kubeflow/pipelines #11957: a channel used only in resource settings inside a
    condition is not passed into it. This is why release.py registers such channels."""
    from kfp import compiler

    @dsl.component(base_image="python:3.11")
    def step(x: str) -> bool:
        return True

    @dsl.pipeline(name="sdk-bug")
    def pipe(gpus: str = "1", cpu: str = "2"):
        first = step(x="a")
        with dsl.If(first.output == True):  # noqa: E712
            second = step(x="b")
            second.set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(gpus).set_cpu_limit(cpu)

    path = tmp_path / "p.yaml"
    compiler.Compiler().compile(pipe, str(path))
    found = ir_check.check_documents([d for d in yaml.safe_load_all(open(path)) if d])
    assert any("gpus" in p for p in found) and any("cpu" in p for p in found), found


@pytest.mark.parametrize("target", ["k8s", "argo"])
@pytest.mark.parametrize("name", NAMES)
def test_compiled_manifests_pass_their_schemas_with_unknown_fields_rejected(name, target):
    docs = _docs(name, target)
    assert docs
    for doc in docs:
        strict(doc)
    text = open(compile_mod.output_path(compile_mod.COMPILED_DIR, name, target)).read()
    assert "&id0" not in text and "*id0" not in text  # plain YAML, no anchors


def test_strict_validation_refuses_what_a_lenient_one_passes():
    trainjob = yaml.safe_load(open(os.path.join(MANIFESTS_DIR, "training", "trainjob.yaml")))
    trainjob["metadata"]["namespace"] = "kubeflow"
    strict(trainjob)
    old = copy.deepcopy(trainjob)
    del old["spec"]["runtimePatches"]
    old["spec"]["podTemplateOverrides"] = [{"targetJobs": [{"name": "node"}], "spec": {"serviceAccountName": "x"}}]
    with pytest.raises(jsonschema.ValidationError, match="podTemplateOverrides"):
        strict(old)
    (pipeline, version) = _docs("release", "k8s")
    bad = copy.deepcopy(version)
    bad["spec"]["pipelineNmae"] = bad["spec"]["pipelineName"]
    with pytest.raises(jsonschema.ValidationError):
        strict(bad)
    (template,) = _docs("release", "argo")
    bad = copy.deepcopy(template)
    bad["spec"]["templates"][1]["container"]["resourcez"] = {}
    with pytest.raises(jsonschema.ValidationError):
        strict(bad)


@pytest.mark.parametrize("name", NAMES)
def test_every_cluster_task_has_requests_limits_and_a_deadline(name):
    spec, platform = _ir(name)
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    for label, executor in spec["deploymentSpec"]["executors"].items():
        if "container" not in executor:
            continue  # importers
        res = executor["container"].get("resources", {})
        for key in ("CpuRequest", "CpuLimit", "MemoryRequest", "MemoryLimit"):
            assert res.get(f"resource{key}"), (label, key)
        assert int(k8s[label]["activeDeadlineSeconds"]) > 0, label  # int64 as a JSON string
    (template,) = _docs(name, "argo")
    for t in template["spec"]["templates"]:
        if "container" in t:
            res = t["container"]["resources"]
            assert set(res["requests"]) >= {"cpu", "memory"} and set(res["limits"]) >= {"cpu", "memory"}
            assert int(t["activeDeadlineSeconds"]) == TIMEOUT[t["name"]]


def test_gpu_count_is_the_accelerator_limit_and_the_ranks():
    spec, _ = _ir("release")
    res = spec["deploymentSpec"]["executors"]["exec-train-zero3"]["container"]["resources"]
    assert res["accelerator"]["resourceCount"] == "{{$.inputs.parameters['pipelinechannel--gpu_count']}}"
    cond = next(c for c in spec["components"].values() if "train-zero3" in c.get("dag", {}).get("tasks", {}))
    gpus = cond["dag"]["tasks"]["train-zero3"]["inputs"]["parameters"]["gpus"]
    assert gpus == {"componentInputParameter": "pipelinechannel--gpu_count"}
    from kfp_llmops.components.common.errors import InputError
    from kfp_llmops.components.training import TrainConfig, ranks_for

    assert TrainConfig.load("", ranks_for("8")).world_size == 8
    assert TrainConfig.load("", ranks_for("0")).world_size == TrainConfig().world_size
    with pytest.raises(InputError, match="gpus"):
        ranks_for("two")


@pytest.mark.parametrize("name", NAMES)
def test_parameters_are_described_named_alike_and_only_where_they_apply(name):
    (spec, _), (template,) = _ir(name), _docs(name, "argo")
    inputs = spec["root"]["inputDefinitions"]["parameters"]
    assert all(p.get("description") for p in inputs.values()), [
        k for k, p in inputs.items() if not p.get("description")
    ]
    cluster = {p.name for p in P.for_pipeline(name, "cluster")}
    assert set(inputs) == cluster
    assert {p["name"] for p in template["spec"]["arguments"]["parameters"]} == cluster
    (_, version) = _docs(name, "k8s")
    assert set(version["spec"]["pipelineSpec"]["root"]["inputDefinitions"]["parameters"]) == cluster
    local_only = {p.name for p in P.ALL.values() if p.forms == ("local",)}
    assert not cluster & local_only
    local = set(LOCAL_PIPELINES[name].component_spec.inputs)
    assert local == {p.name for p in P.for_pipeline(name, "local")} and local_only & local


@pytest.mark.parametrize("name", NAMES)
def test_every_component_input_is_described_in_the_ir(name):
    """The Kubeflow UI shows a component's inputs with the descriptions its docstring's
    `Args:` gave; a component composed into someone else's pipeline has no other help."""
    spec = _ir(name)[0]
    executors = spec["deploymentSpec"]["executors"]
    bare = [
        (comp_name, inp)
        for comp_name, comp in spec["components"].items()
        if "executorLabel" in comp and "importer" not in executors[comp["executorLabel"]]
        for kind in ("parameters", "artifacts")
        for inp, definition in comp.get("inputDefinitions", {}).get(kind, {}).items()
        if not definition.get("description")
    ]
    assert not bare, bare
    assert len({c for c in spec["components"] if "executorLabel" in spec["components"][c]}) >= 5


def test_config_parameters_accept_one_line_json_as_well_as_yaml():
    from kfp_llmops.components.data_validation.config import DataValidationConfig
    from kfp_llmops.components.deploy import DeployConfig
    from kfp_llmops.components.evaluation.config import EvalConfig
    from kfp_llmops.components.training import TrainConfig
    from kfp_llmops.components.watermark.config import WatermarkConfig

    models = {
        "data_config": DataValidationConfig,
        "train_config": TrainConfig,
        "eval_config": EvalConfig,
        "watermark_config": WatermarkConfig,
        "deploy_config": DeployConfig,
    }
    for name, model in models.items():
        example = P.ALL[name].example
        assert example and "\n" not in example and example in P.ALL[name].help
        from_json = model.load(example)
        assert from_json != model() and from_json == model.load(yaml.safe_dump(json.loads(example)))
        assert issubclass(model, StageConfig)


def test_pipeline_versions_are_named_by_their_spec(monkeypatch):
    names = {compile_mod.version_name(n) for n in NAMES}
    assert len(names) == len(NAMES)
    (_, version) = _docs("release", "k8s")
    assert version["metadata"]["name"] == compile_mod.version_name("release")
    assert version["metadata"]["name"].endswith(compile_mod.spec_digest("release"))
    before = compile_mod.version_name("release")
    real = compile_mod._kfp
    monkeypatch.setattr(compile_mod, "_kfp", lambda n, **o: real(n, **o).replace("ghcr.io", "registry.example"))
    assert compile_mod.version_name("release") != before  # another spec, another name


def test_argo_cd_keeps_older_pipeline_versions():
    apps = list(yaml.safe_load_all(open(os.path.join(MANIFESTS_DIR, "gitops", "applications.yaml"))))
    assert apps and all(a["spec"]["syncPolicy"]["automated"]["prune"] is False for a in apps)


@pytest.mark.parametrize("name", NAMES)
def test_argo_form_runs_the_same_stages_with_executor_rbac_and_pull_secrets(name):
    (template,) = _docs(name, "argo")
    spec = template["spec"]
    main = next(t for t in spec["templates"] if t["name"] == spec["entrypoint"])
    argo_tasks = {t["name"] for t in main["dag"]["tasks"]}
    ir = _ir(name)[0]
    kfp_tasks = {
        t["taskInfo"]["name"]
        for c in [ir["root"], *ir["components"].values()]
        if "dag" in c
        for t in c["dag"]["tasks"].values()
        if "executorLabel" in ir["components"][t["componentRef"]["name"]]
    }
    kfp_tasks -= {
        "import-dataset",
        "import-eval-dataset",
        "import-model",
        "import-checkpoints",
        "release-record",
        *CACHE_TASKS,
    }
    assert argo_tasks == kfp_tasks
    assert spec["onExit"] == "release-record" and spec["imagePullSecrets"] == [{"name": "llmops-registry"}]
    assert spec["automountServiceAccountToken"] is False
    executor = spec["executor"]["serviceAccountName"]
    rbac = subprocess.run(["kubectl", "kustomize", MANIFESTS_DIR], capture_output=True, text=True, check=True).stdout
    roles = {d["metadata"]["name"]: d for d in yaml.safe_load_all(rbac) if d and d["kind"] == "Role"}
    assert roles[executor]["rules"] == [
        {"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"], "verbs": ["create", "patch"]}
    ]
    pvcs = {d["metadata"]["name"] for d in yaml.safe_load_all(rbac) if d and d["kind"] == "PersistentVolumeClaim"}
    claims = {v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v}
    defaults = {p["name"]: p.get("value") for p in spec["arguments"]["parameters"]}
    assert {defaults[c.strip("{}").split(".")[-1]] for c in claims} <= pvcs  # every claim has a manifest
    for t in spec["templates"]:
        if t.get("serviceAccountName"):
            assert t["serviceAccountName"] in argo.SERVICE_ACCOUNTS.values() and t["automountServiceAccountToken"]


class _Recorder:
    """Stands in for kfp.Client, whose server cannot run here; records the calls."""

    def __init__(self, pipeline_id=None, versions=()):
        self.calls, self.pipeline_id, self.versions = [], pipeline_id, list(versions)

    def __getattr__(self, name):
        from types import SimpleNamespace as NS

        def call(*args, **kwargs):
            self.calls.append(name)
            return {
                "get_pipeline_id": lambda: self.pipeline_id,
                "upload_pipeline": lambda: NS(pipeline_id="p1"),
                "list_pipeline_versions": lambda: NS(
                    pipeline_versions=[NS(pipeline_version_id=v) for v in self.versions] or None
                ),
                "upload_pipeline_version": lambda: NS(pipeline_version_id="v1"),
                "create_experiment": lambda: NS(experiment_id="e1"),
                "run_pipeline": lambda: NS(run_id="r1"),
                "_get_url_prefix": lambda: "http://kfp.example",
            }[name]()

        return call


def test_submit_uploads_a_missing_version_and_runs_attached_to_it():
    fresh = _Recorder()
    out = publish_and_run(fresh, "x.yaml", "llmops-release", "llmops-release-0-1-0-abc", "team-a", "e", {"a": "1"})
    assert fresh.calls == [
        "get_pipeline_id",
        "upload_pipeline",
        "list_pipeline_versions",
        "upload_pipeline_version",
        "create_experiment",
        "run_pipeline",
        "_get_url_prefix",
    ]
    assert out["version_id"] == "v1" and out["url"] == "http://kfp.example/#/runs/details/r1"
    known = _Recorder(pipeline_id="p0", versions=["v0"])
    out = publish_and_run(known, "x.yaml", "llmops-release", "llmops-release-0-1-0-abc", None, "e", {})
    assert "upload_pipeline" not in known.calls and "upload_pipeline_version" not in known.calls
    assert out["uploaded"] == [] and out["version_id"] == "v0" and out["pipeline_id"] == "p0"


def test_compile_against_the_users_registry_and_digests(tmp_path, capsys):
    reg = "registry.example.com/ml"
    assert main_cli(["compile", "--registry", reg, "--target", "kfp", "--target", "argo", "--out", str(tmp_path)]) == 0
    for name in NAMES:
        spec = next(yaml.safe_load_all(open(tmp_path / f"{name}.yaml")))
        used = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values() if "container" in e}
        assert used and all(i.startswith(f"{reg}/") and i.endswith(":0.1.0") for i in used), used
        (argo_doc,) = yaml.safe_load_all(open(tmp_path / "argo" / f"{name}.yaml"))
        assert all(
            t["container"]["image"].startswith(f"{reg}/") for t in argo_doc["spec"]["templates"] if "container" in t
        )
    digests = tmp_path / "digests.json"
    digests.write_text(
        json.dumps({s: "sha256:" + f"{i:x}" * 64 for i, s in enumerate(["base", "data", "train", "eval", "deploy"], 1)})
    )
    out = tmp_path / "pinned"
    assert (
        main_cli(
            [
                "compile",
                "--registry",
                reg,
                "--tag",
                "2025.1",
                "--digests",
                str(digests),
                "--target",
                "kfp",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    spec = next(yaml.safe_load_all(open(out / "release.yaml")))
    train = spec["deploymentSpec"]["executors"]["exec-train-zero3"]["container"]["image"]
    assert train == f"{reg}/train:2025.1@sha256:" + "3" * 64
    assert ir_check.problems(spec) == []
    capsys.readouterr()
    assert main_cli(["compile", "--registry", reg]) == 2  # the committed files keep the defaults
    assert "pass --out" in capsys.readouterr().err
    assert compile_mod.compile_all(compile_mod.COMPILED_DIR, check=True) == []
