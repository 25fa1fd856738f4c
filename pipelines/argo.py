"""`llmops compile --target argo`: the release pipeline as a standalone Argo
WorkflowTemplate, runnable without the KFP API server or ML Metadata.

Each task runs `llmops stage run <stage>` in the stage's image, the same `run_component`
entry point the KFP component calls; artifacts and their Merkle-root metadata live on a
PVC under `/work/<workflow name>`. Gates become `when` conditions on the previous
task's `result` output, training retries on failure, and the release record is the
`onExit` handler, so it is written whatever happened.
"""
from __future__ import annotations

from kfp_llmops.components import images

WORK = "/work"
KEY_DIR = "/var/run/secrets/kfp-llmops/watermark"
PARAMS = {  # name -> default ("" = none); every knob a user changes per run
    "dataset": None, "eval_dataset": None, "data_config": "", "pii_policy": "balanced",
    "base_model_size": "demo", "train_config": "", "checkpoint_dir": "", "eval_config": "",
    "watermark_config": "", "deploy_config": "target: kserve\n", "work_pvc": "llmops-work",
}
# task, stage, image, parameters it takes, the gate that must be "true" before it runs
TASKS = [
    ("validate-dataset", "validate_dataset", images.DATA, ["dataset", "data_config", "pii_policy"], None),
    ("build-base-model", "build_base_model", images.TRAIN, ["base_model_size"], "validate-dataset"),
    ("train-zero3", "train_zero3", images.TRAIN, ["train_config", "checkpoint_dir"], None),
    ("evaluate-llm", "evaluate_llm", images.EVAL, ["eval_dataset", "eval_config"], None),
    ("verify-watermark", "verify_watermark", images.EVAL, ["eval_dataset", "watermark_config"], "evaluate-llm"),
    ("triton-canary-deploy", "triton_canary_deploy", images.DEPLOY, ["deploy_config"], "verify-watermark"),
]
SERVICE_ACCOUNTS = {"train_zero3": "llmops-train", "triton_canary_deploy": "llmops-deploy"}
SECURITY = {"runAsNonRoot": True, "runAsUser": 10001, "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": False, "capabilities": {"drop": ["ALL"]}}


def _container(stage: str, image: str, params: list[str], extra: list[str] | None = None) -> dict:
    run = f"{WORK}/{{{{workflow.name}}}}"
    args = ["stage", "run", stage, "--work", run, "--param", f"release_dir={run}/release"]
    for name in params:
        args += ["--param", f"{name}={{{{workflow.parameters.{name}}}}}"]
    args += extra or []
    if stage in ("verify_watermark", "triton_canary_deploy"):
        args += ["--param", f"watermark_key_file={KEY_DIR}/key"]
    mounts = [{"name": "work", "mountPath": WORK}]
    if stage in ("verify_watermark", "triton_canary_deploy"):
        mounts.append({"name": "watermark-key", "mountPath": KEY_DIR, "readOnly": True})
    return {"image": image, "command": ["llmops"], "args": args, "volumeMounts": mounts,
            "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}, {"name": "LLMOPS_NO_PROGRESS", "value": "1"}],
            "securityContext": dict(SECURITY)}


def _template(task: str, stage: str, image: str, params: list[str]) -> dict:
    t = {"name": task, "container": _container(stage, image, params),
         "outputs": {"parameters": [{"name": "result",
                                     "valueFrom": {"path": f"{WORK}/{{{{workflow.name}}}}/{stage}/result"}}]}}
    if stage == "train_zero3":
        t["retryStrategy"] = {"limit": "2", "retryPolicy": "OnFailure"}
        t["container"]["resources"] = {"limits": {"cpu": "8", "memory": "32Gi"}}
    # Least privilege: only these two talk to the API, each with its own Role (manifests/rbac).
    if stage in SERVICE_ACCOUNTS:
        t["serviceAccountName"] = SERVICE_ACCOUNTS[stage]
        t["automountServiceAccountToken"] = True
    return t


def workflow_template(name: str = "llmops-release", namespace: str = "kubeflow") -> dict:
    tasks, previous = [], None
    for task, _stage, _image, _params, gate in TASKS:
        entry = {"name": task, "template": task}
        if previous:
            entry["depends"] = f"{previous}.Succeeded"
        if gate:
            entry["when"] = f"'{{{{tasks.{gate}.outputs.parameters.result}}}}' == 'true'"
        tasks.append(entry)
        previous = task
    templates = [{"name": "release", "dag": {"tasks": tasks}}]
    templates += [_template(task, stage, image, params) for task, stage, image, params, _ in TASKS]
    templates.append({"name": "release-record", "container": _container(
        "release_record", images.BASE, [], ["--param", "status={{workflow.status}}",
                                            "--param", "run={{workflow.name}}"])})
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/part-of": "kfp-llmops", "app.kubernetes.io/version": images.TAG}},
        "spec": {
            "entrypoint": "release",
            "onExit": "release-record",
            "serviceAccountName": "llmops-pipeline",
            "arguments": {"parameters": [{"name": k, **({} if v is None else {"value": v})} for k, v in PARAMS.items()]},
            "volumes": [{"name": "work", "persistentVolumeClaim": {"claimName": "{{workflow.parameters.work_pvc}}"}},
                        {"name": "watermark-key", "secret": {"secretName": "llmops-watermark-key"}}],
            "templates": templates,
        },
    }
