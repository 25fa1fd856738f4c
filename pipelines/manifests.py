"""The kustomize tree under manifests/: least-privilege RBAC per component that needs the
Kubernetes API, NetworkPolicies, serving and training templates rendered by the same
code the stages use, and the GitOps pieces. `llmops compile` writes the generated files;
`--check` fails when they drift."""

from __future__ import annotations

import os

import yaml

from kfp_llmops.components.common.k8s import DEFAULT_NAMESPACE, TASK_LABEL
from kfp_llmops.components.deploy import DeployConfig
from kfp_llmops.components.deploy.cluster import (
    LABELS,
    TRACK_LABEL,
    render_gateway_doors,
    render_httproute,
    render_inference_service,
)
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
        "automountServiceAccountToken": component not in ("pipeline", "argo-executor", "serving"),
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
    """Only the deploy, training and data components talk to the API, each to its own kinds;
    the served model has an account of its own that holds nothing and mounts no token."""
    served = DeployConfig().cluster.service_name  # another name: patch these resourceNames with kustomize
    deploy_rules = [
        # server-side apply only (a PATCH naming the object, so `create` is checked with its name)
        {
            "apiGroups": ["serving.kserve.io"],
            "resources": ["inferenceservices"],
            "resourceNames": [served],
            "verbs": ["get", "create", "patch"],
        },
        {
            "apiGroups": ["gateway.networking.k8s.io"],
            "resources": ["httproutes"],
            "resourceNames": [served],
            "verbs": ["get", "create", "patch"],
        },
        # one rollout per served model: the Lease `<service>-rollout` (deploy/rollout_lock.py);
        # a POST carries no name for RBAC to check, so `create` cannot be narrowed
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [f"{served}-rollout"],
            "verbs": ["get", "update"],
        },
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
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
        _sa(DeployConfig().cluster.service_account, "serving"),
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


PRIVATE = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16"]


def network_policies() -> list[dict]:
    """Every pod of the project is isolated (nothing reaches it unless a policy below lets
    it); the pods that must be reached are let in from their peers only: Ray's head and
    workers from each other and KubeRay's submitter, a TrainJob's nodes from each other,
    the served model from the gateway, Knative, the front door and the pipeline's tasks on
    the ports KServe's Triton, Knative's queue-proxy and the gateway form's Triton really
    listen on, and its metrics from Prometheus; the front door (the transformer, or the
    gateway form's doors) from the gateway, Knative and the pipeline's tasks only. The
    served model's egress is DNS and HTTPS outside the cluster's private ranges (the
    storage initializer's download); the front door's is DNS and the way to the predictor
    (the gateway form's: its side's Triton), nothing else."""

    def policy(name, selector, ingress, egress=None):
        spec = {
            "podSelector": selector,
            "policyTypes": ["Ingress"] + (["Egress"] if egress is not None else []),
            "ingress": ingress,
        }
        if egress is not None:
            spec["egress"] = egress
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta(name), "spec": spec}

    def namespaces(*names):
        return [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": n}}} for n in names]

    def having(label, **match):
        return {"matchLabels": {**PART_OF, **match}, "matchExpressions": [{"key": label, "operator": "Exists"}]}

    def tcp(*ports):
        return [{"protocol": "TCP", "port": p} for p in ports]

    isvc = {"serving.kserve.io/inferenceservice": DeployConfig().cluster.service_name}
    # KServe labels each component's pods: the predictor (Triton) and the transformer (the front door)
    not_door = {"key": "component", "operator": "NotIn", "values": ["transformer"]}
    serving = {"matchLabels": isvc, "matchExpressions": [not_door]}
    door = {"matchLabels": {**isvc, "component": "transformer"}}
    knative = namespaces("knative-serving", "kourier-system", "istio-system")
    tasks = [{"podSelector": {"matchLabels": dict(TASK_LABEL)}}]
    ray = having("ray.io/cluster")
    ray_peers = [
        {"podSelector": {"matchExpressions": [{"key": "ray.io/cluster", "operator": "Exists"}]}},
        {"podSelector": {"matchLabels": {"ray.io/originated-from-crd": "RayJob"}}},  # KubeRay's submitter
    ]
    trainjob = having("trainer.kubeflow.org/trainjob-name")
    train_peers = [
        {"podSelector": {"matchExpressions": [{"key": "trainer.kubeflow.org/trainjob-name", "operator": "Exists"}]}}
    ]
    dns = {"to": namespaces("kube-system"), "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    outside = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": PRIVATE}}], "ports": tcp(443)}
    return [
        policy("llmops-deny-ingress", {"matchLabels": dict(PART_OF)}, []),
        policy("llmops-tasks-deny-ingress", {"matchLabels": dict(TASK_LABEL)}, []),
        policy("llmops-ray", ray, [{"from": ray_peers}]),
        policy("llmops-trainjob", trainjob, [{"from": train_peers}]),
        policy(
            "llmops-serving",
            serving,
            [
                {
                    "from": namespaces("gateway-system") + knative + tasks + [{"podSelector": door}],
                    # gateway form: Triton 8000/8001; KServe: Triton 8080/9000 behind queue-proxy 8012/8013,
                    # whose autoscaling metrics Knative reads on 9090
                    "ports": tcp(8000, 8001, 8080, 9000, 8012, 8013, 9090),
                },
                {"from": namespaces("monitoring"), "ports": tcp(8002, 9091)},
            ],
            [dns, outside],
        ),
        policy(
            "llmops-front-door",
            door,
            # the pipeline's tasks too: the controller's smoke tests at the canary's own door
            [{"from": namespaces("gateway-system") + knative + tasks, "ports": tcp(8080, 8012, 8013, 9090)}],
            # to the predictor: through Knative's activator (8012/8013) or the cluster-local gateway
            # (Kourier's or Istio's, 8081), or straight to its queue-proxy
            # (the gateway form's doors: to their side's Triton on 8000)
            [dns, {"to": knative + [{"podSelector": serving}], "ports": tcp(8012, 8013, 8081, 8000)}],
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
                "selector": {TRACK_LABEL: track},
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
        "serving/gateway/front-doors.yaml": render_gateway_doors(gw_cfg),
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
        "serving/gateway/kustomization.yaml": [_kustomization(["httproute.yaml", "services.yaml", "front-doors.yaml"])],
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
