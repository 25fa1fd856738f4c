"""The kustomize tree under manifests/: least-privilege RBAC per component that needs the
Kubernetes API, NetworkPolicies, serving and training templates rendered by the same
code the stages use, and the GitOps pieces. `llmops compile` writes the generated files;
`--check` fails when they drift."""

from __future__ import annotations

import os

import yaml

from kfp_llmops.components.common.k8s import DEFAULT_NAMESPACE
from kfp_llmops.components.deploy import DeployConfig
from kfp_llmops.components.deploy.cluster import LABELS, render_httproute, render_inference_service
from kfp_llmops.components.training.config import MultiNodeSettings
from kfp_llmops.components.training.trainjob import render_runtime, render_trainjob

from .argo import EXECUTOR_SA

MANIFESTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "manifests")
NS = DEFAULT_NAMESPACE
REPOSITORY_ROOT = "REPOSITORY_ROOT"  # replaced per release by the deploy stage
PART_OF = {"app.kubernetes.io/part-of": "kfp-llmops"}
REPO_URL = "https://github.com/kfp-llmops/kfp-llmops.git"


def _meta(name: str, **labels) -> dict:
    return {"name": name, "labels": {**PART_OF, **labels}}


def _sa(name: str, component: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(name, **{"kfp-llmops/component": component}),
        "automountServiceAccountToken": component not in ("pipeline", "argo-executor"),
    }


def _role(name: str, rules: list[dict]) -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(name), "rules": rules}


def _binding(name: str) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name}],
    }


def rbac() -> list[dict]:
    """Only the deploy, training and data components talk to the API, each to its own kinds."""
    deploy_rules = [
        {
            "apiGroups": ["serving.kserve.io"],
            "resources": ["inferenceservices"],
            "verbs": ["get", "list", "watch", "patch", "update"],
        },
        {
            "apiGroups": ["gateway.networking.k8s.io"],
            "resources": ["httproutes"],
            "verbs": ["get", "list", "watch", "patch", "update"],
        },
        # one rollout per served model: the Lease `<service>-rollout` (deploy/rollout_lock.py)
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
    ]
    # train_zero3 with multinode.nodes > 1: creates its TrainJob, follows its pods and the launcher's log.
    train_rules = [
        {
            "apiGroups": ["trainer.kubeflow.org"],
            "resources": ["trainjobs"],
            "verbs": ["create", "get", "list", "watch", "delete"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    ]
    # validate_dataset with engine: ray and ray.kuberay.enabled: creates its RayJob, follows
    # the submitter's log and the Ray pods' ends.
    data_rules = [
        {"apiGroups": ["ray.io"], "resources": ["rayjobs"], "verbs": ["create", "get", "list", "watch", "delete"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    ]
    # Argo's executor (the standalone form's `executor.serviceAccountName`) reports each
    # task's outputs as WorkflowTaskResults; without this no `when` gate sees a result.
    executor_rules = [
        {"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"], "verbs": ["create", "patch"]}
    ]
    return [
        _sa("llmops-pipeline", "pipeline"),
        _sa("llmops-deploy", "deploy"),
        _role("llmops-deploy", deploy_rules),
        _binding("llmops-deploy"),
        _sa("llmops-train", "train"),
        _role("llmops-train", train_rules),
        _binding("llmops-train"),
        _sa("llmops-data", "data"),
        _role("llmops-data", data_rules),
        _binding("llmops-data"),
        _sa(EXECUTOR_SA, "argo-executor"),
        _role(EXECUTOR_SA, executor_rules),
        _binding(EXECUTOR_SA),
    ]


# PVCs the cluster forms mount: name -> (access mode, size, what it holds)
VOLUMES = {
    "llmops-release": (
        "ReadWriteMany",
        "50Gi",
        "release records, lineage notes, the standalone form's artifacts, the local target's serving state",
    ),
    "llmops-checkpoints": (
        "ReadWriteOnce",
        "500Gi",
        "training checkpoints, a folder per run (ReadWriteMany for multi-node training)",
    ),
}


def volumes() -> list[dict]:
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {**_meta(name), "annotations": {"kfp-llmops/holds": holds}},
            "spec": {"accessModes": [mode], "resources": {"requests": {"storage": size}}},
        }
        for name, (mode, size, holds) in VOLUMES.items()
    ]


def network_policies() -> list[dict]:
    def policy(name, selector, ingress, egress=None):
        spec = {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress"] + (["Egress"] if egress is not None else []),
            "ingress": ingress,
        }
        if egress is not None:
            spec["egress"] = egress
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta(name), "spec": spec}

    serving = {"serving.kserve.io/inferenceservice": "llm"}
    gateway = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway-system"}}}]
    monitoring = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    pipeline_pods = [{"podSelector": {"matchLabels": {"app.kubernetes.io/part-of": "kfp-llmops"}}}]
    return [
        policy("llmops-stages-deny-ingress", {"app.kubernetes.io/part-of": "kfp-llmops"}, []),
        policy(
            "llmops-serving",
            serving,
            [
                {
                    "from": gateway + pipeline_pods,
                    "ports": [{"protocol": "TCP", "port": 8000}, {"protocol": "TCP", "port": 8001}],
                },
                {"from": monitoring + pipeline_pods, "ports": [{"protocol": "TCP", "port": 8002}]},
            ],
        ),
    ]


def serving() -> dict[str, list[dict]]:
    kserve = render_inference_service(DeployConfig(), REPOSITORY_ROOT, None)
    gw_cfg = DeployConfig.load("target: gateway\n")
    route = render_httproute(gw_cfg, 0)
    services = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(name, **LABELS),
            "spec": {
                "selector": {"kfp-llmops/track": track},
                "ports": [
                    {"name": "http", "port": 8000, "targetPort": 8000, "protocol": "TCP"},
                    {"name": "metrics", "port": 8002, "targetPort": 8002, "protocol": "TCP"},
                ],
            },
        }
        for name, track in ((gw_cfg.cluster.stable_service, "stable"), (gw_cfg.cluster.canary_service, "canary"))
    ]
    for doc in (kserve, route):
        doc["metadata"].pop("namespace", None)
    return {
        "serving/kserve/inferenceservice.yaml": [kserve],
        "serving/gateway/httproute.yaml": [route],
        "serving/gateway/services.yaml": services,
    }


def training() -> list[dict]:
    """An example TrainJob as train_zero3 creates it (2 nodes of 8 GPUs; it names its own
    jobs and run folders), and the runtime it runs on."""
    settings = MultiNodeSettings(nodes=2, gpus_per_node=8)
    job = render_trainjob("llmops-train", f"{settings.mount_path}/RUN_ID.run/run_spec.json", settings, 8)
    job["metadata"].pop("namespace", None)
    return [job]


def argocd_applications() -> list[dict]:
    def app(name, path):
        return {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Application",
            "metadata": {"name": name, "namespace": "argocd", "labels": dict(PART_OF)},
            "spec": {
                "project": "default",
                "source": {"repoURL": REPO_URL, "targetRevision": "main", "path": path},
                "destination": {"server": "https://kubernetes.default.svc", "namespace": NS},
                # No prune: a PipelineVersion is immutable and runs refer to it; an
                # older version leaves only when someone deletes it on purpose.
                "syncPolicy": {
                    "automated": {"prune": False, "selfHeal": True},
                    "syncOptions": ["ServerSideApply=true"],
                },
            },
        }

    return [app("kfp-llmops-platform", "manifests"), app("kfp-llmops-pipelines", "pipelines/compiled/k8s")]


def _kustomization(resources: list[str], namespace: str | None = NS) -> dict:
    doc = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    if namespace:
        doc["namespace"] = namespace
    doc["resources"] = resources
    return doc


def tree() -> dict[str, list[dict]]:
    files = {
        "kustomization.yaml": [_kustomization(["rbac", "network", "storage", "training/runtime"])],
        "storage/kustomization.yaml": [_kustomization(["pvcs.yaml"])],
        "storage/pvcs.yaml": volumes(),
        "rbac/kustomization.yaml": [_kustomization(["rbac.yaml"])],
        "rbac/rbac.yaml": rbac(),
        "network/kustomization.yaml": [_kustomization(["networkpolicies.yaml"])],
        "network/networkpolicies.yaml": network_policies(),
        "serving/kserve/kustomization.yaml": [_kustomization(["inferenceservice.yaml"])],
        "serving/gateway/kustomization.yaml": [_kustomization(["httproute.yaml", "services.yaml"])],
        "training/kustomization.yaml": [_kustomization(["trainjob.yaml"])],
        "training/trainjob.yaml": training(),
        "training/runtime/kustomization.yaml": [_kustomization(["runtime.yaml"])],
        "training/runtime/runtime.yaml": [render_runtime()],
        "gitops/kustomization.yaml": [_kustomization(["applications.yaml"], None)],
        "gitops/applications.yaml": argocd_applications(),
    }
    files.update(serving())
    return dict(sorted(files.items()))


def render(docs: list[dict]) -> str:
    return "---\n".join(yaml.safe_dump(d, sort_keys=False, width=120) for d in docs)


def write_all(root: str = MANIFESTS_DIR, check: bool = False) -> list[str]:
    stale = []
    for rel, docs in tree().items():
        path = os.path.join(root, rel)
        text = render(docs)
        current = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if current == text:
            continue
        stale.append(f"manifests/{rel}")
        if not check:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
    return stale
