"""`llmops compile --target argo`: each pipeline as a standalone Argo WorkflowTemplate,
runnable without the KFP API server or ML Metadata.

Each task runs `llmops stage run <stage>` in the stage's image, the same `run_component`
entry point the KFP component calls; artifacts and their Merkle-root metadata live on the
release PVC under `<run>/work`, the release record under `<run>`. Parameters are the KFP
cluster form's (`params.py`), with the same names and meanings: datasets and models come
as URIs (s3://, gs://, http(s)://, or a path on a mounted PVC) that the stage runner
fetches. Gates become `when` conditions on the previous task's `result` output, training
retries on failure, the release record is the `onExit` handler.

Pods run with no service-account token except where they need the API (validation,
training and deploy, each with its own Role); Argo's executor reports outputs with its own account
(`executor.serviceAccountName`, allowed only `workflowtaskresults`), as Argo recommends.

Built as plain dicts and checked against Argo's own JSON schema with unknown fields
rejected (tests); Hera was not adopted: it would add a dependency to the base image for
models the schema test already enforces.
"""

from __future__ import annotations

from kfp_llmops.components import images
from kfp_llmops.components.common import records
from kfp_llmops.components.common.k8s import DEFAULT_NAMESPACE, TASK_LABEL

from . import params as P
from .release import (
    API_KEYS_MOUNT,
    API_KEYS_SECRET,
    CHECKPOINT_MOUNT,
    FIXED_SIZE,
    KEY_MOUNT,
    KEY_SECRET,
    PULL_SECRET,
    RELEASE_MOUNT,
    SIGNING_MOUNT,
    SIGNING_SECRET,
    STORAGE_ENV,
    STORAGE_SECRET,
    STORAGE_TASKS,
    TIMEOUT,
)

RUN = f"{RELEASE_MOUNT}/{{{{workflow.name}}}}"
WORK = f"{RUN}/work"
EXECUTOR_SA = "llmops-argo-executor"
SERVICE_ACCOUNTS = {
    "validate_dataset": "llmops-data",
    "train_zero3": "llmops-train",
    "triton_canary_deploy": "llmops-deploy",
}
SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": images.UID,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": False,
    "capabilities": {"drop": ["ALL"]},
}
# stage -> its pod size parameters (None: fixed); its task name, image and the parameters
# it reads come from the stage table
_SIZES = {
    "train_zero3": ("train_cpu", "train_memory"),
    "evaluate_llm": ("eval_cpu", "eval_memory"),
    "verify_watermark": ("eval_cpu", "eval_memory"),
    "triton_canary_deploy": ("deploy_cpu", "deploy_memory"),
}
STAGES = {s.name: (s.task, images.image(s.image), list(s.params), _SIZES.get(s.name)) for s in records.STAGES}
# pipeline -> its stages in order, each with the stage whose `result` must be "true" first
FLOWS = {
    "release": [
        ("validate_dataset", None),
        ("build_base_model", "validate_dataset"),
        ("train_zero3", None),
        ("evaluate_llm", None),
        ("verify_watermark", "evaluate_llm"),
        ("triton_canary_deploy", "verify_watermark"),
    ],
    "continue-training": [
        ("validate_dataset", None),
        ("train_zero3", "validate_dataset"),
        ("evaluate_llm", None),
        ("verify_watermark", "evaluate_llm"),
        ("triton_canary_deploy", "verify_watermark"),
    ],
    "evaluate-deploy": [
        ("evaluate_llm", None),
        ("verify_watermark", "evaluate_llm"),
        ("triton_canary_deploy", "verify_watermark"),
    ],
}


def _param(name: str) -> str:
    return f"{{{{workflow.parameters.{name}}}}}"


def _container(stage: str, image: str, names: list[str], declared: set[str], extra: list[str] | None = None) -> dict:
    args = ["stage", "run", stage, "--work", WORK, "--param", f"release_dir={RUN}"]
    for name in names:
        if name in declared:
            args += ["--param", f"{name}={_param(name)}"]
    mounts = [{"name": "release", "mountPath": RELEASE_MOUNT}]
    env = [{"name": "HF_HUB_OFFLINE", "value": "1"}, {"name": "LLMOPS_NO_PROGRESS", "value": "1"}]
    if stage in ("verify_watermark", "triton_canary_deploy"):
        args += ["--param", f"watermark_key_file={KEY_MOUNT}/key"]
        mounts.append({"name": "watermark-key", "mountPath": KEY_MOUNT, "readOnly": True})
    if stage in ("train_zero3", "triton_canary_deploy", "release_record"):
        args += [
            "--param",
            f"signing_key_file={SIGNING_MOUNT}/private.pem",
            "--param",
            f"signing_public_key_file={SIGNING_MOUNT}/public.pem",
        ]
        mounts.append({"name": "signing-key", "mountPath": SIGNING_MOUNT, "readOnly": True})
    if stage == "triton_canary_deploy":
        args += ["--param", "default_target=kserve"]
        mounts.append({"name": "api-keys", "mountPath": API_KEYS_MOUNT, "readOnly": True})
    if stage == "train_zero3":
        args += ["--param", f"checkpoint_dir={CHECKPOINT_MOUNT}/{{{{workflow.name}}}}"]
        mounts.append({"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT})
    if stage.replace("_", "-") in STORAGE_TASKS:
        env += [
            {"name": var, "valueFrom": {"secretKeyRef": {"name": STORAGE_SECRET, "key": key}}}
            for key, var in STORAGE_ENV.items()
        ]
    return {
        "image": image,
        "command": ["llmops"],
        "args": args + (extra or []),
        "volumeMounts": mounts,
        "env": env,
        "securityContext": dict(SECURITY),
    }


def _size(task: str, size: tuple[str, str] | None) -> dict:
    cpu, memory = (_param(size[0]), _param(size[1])) if size else FIXED_SIZE[task]
    both = {"cpu": cpu, "memory": memory}
    return {"requests": dict(both), "limits": dict(both)}


def _template(stage: str, declared: set[str]) -> dict:
    task, image, names, size = STAGES[stage]
    container = _container(stage, image, names, declared)
    container["resources"] = _size(task, size)
    t = {
        "name": task,
        "activeDeadlineSeconds": str(TIMEOUT[task]),
        "container": container,
        "outputs": {"parameters": [{"name": "result", "valueFrom": {"path": f"{WORK}/{stage}/result"}}]},
    }
    if stage == "train_zero3":
        t["retryStrategy"] = {"limit": "2", "retryPolicy": "OnFailure"}
        container["resources"]["limits"][_param("gpu_type")] = _param("gpu_count")
        t["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    # Least privilege: only these talk to the API, each with its own Role (manifests/rbac).
    if stage in SERVICE_ACCOUNTS:
        t["serviceAccountName"] = SERVICE_ACCOUNTS[stage]
        t["automountServiceAccountToken"] = True
    return t


def workflow_template(pipeline: str, name: str, namespace: str = DEFAULT_NAMESPACE) -> dict:
    declared = P.for_pipeline(pipeline, "cluster")
    names = {p.name for p in declared}
    tasks, previous = [], None
    for stage, gate in FLOWS[pipeline]:
        entry = {"name": STAGES[stage][0], "template": STAGES[stage][0]}
        if previous:
            entry["depends"] = f"{previous}.Succeeded"
        if gate:
            entry["when"] = f"'{{{{tasks.{STAGES[gate][0]}.outputs.parameters.result}}}}' == 'true'"
        tasks.append(entry)
        previous = entry["name"]
    record = {
        "name": records.RELEASE_TASK,
        "activeDeadlineSeconds": str(TIMEOUT[records.RELEASE_TASK]),
        "container": _container(
            "release_record",
            images.image(records.RELEASE_STAGE.image),
            list(records.RELEASE_STAGE.params),
            names,
            ["--param", "status={{workflow.status}}", "--param", "run={{workflow.name}}"],
        ),
    }
    record["container"]["resources"] = _size("release-record", None)
    volumes = [
        {"name": "release", "persistentVolumeClaim": {"claimName": _param("release_pvc")}},
        {"name": "watermark-key", "secret": {"secretName": KEY_SECRET}},
        {"name": "signing-key", "secret": {"secretName": SIGNING_SECRET}},
        {"name": "api-keys", "secret": {"secretName": API_KEYS_SECRET}},
    ]
    if "checkpoint_pvc" in names:
        volumes.insert(1, {"name": "checkpoints", "persistentVolumeClaim": {"claimName": _param("checkpoint_pvc")}})
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "kfp-llmops", "app.kubernetes.io/version": images.TAG},
        },
        "spec": {
            "entrypoint": "main",
            "onExit": "release-record",
            "serviceAccountName": "llmops-pipeline",
            "automountServiceAccountToken": False,
            "podMetadata": {"labels": dict(TASK_LABEL)},
            "executor": {"serviceAccountName": EXECUTOR_SA},
            "imagePullSecrets": [{"name": PULL_SECRET}],
            "arguments": {
                "parameters": [
                    {"name": p.name, "description": p.help, **({} if p.default is None else {"value": p.default})}
                    for p in declared
                ]
            },
            "volumes": volumes,
            "templates": [{"name": "main", "dag": {"tasks": tasks}}]
            + [_template(stage, names) for stage, _ in FLOWS[pipeline]]
            + [record],
        },
    }
